-- why: a monthly model reading the previous month as well (a month is taken as 31 days)
-- sources: {shop.daily_customer_revenue: order_date}
-- time_column: month_start
-- interval: 31d
-- expect:
--   class: FullyBatchSafe
--   bounds: {shop.daily_customer_revenue: [P31D, PT0S]}
SELECT
  TRUNC(order_date, 'MM') AS month_start,
  country,
  SUM(revenue) AS revenue
FROM shop.daily_customer_revenue
WHERE order_date >= add_months(@start_date, -1) AND order_date <= @end_date
GROUP BY TRUNC(order_date, 'MM'), country
