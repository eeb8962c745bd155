-- why: a monthly model grouped by TRUNC(date, 'MM') reads whole months from a daily model
-- sources: {shop.daily_customer_revenue: order_date}
-- time_column: month_start
-- interval: 31d
-- expect:
--   class: FullyBatchSafe
--   bounds: {shop.daily_customer_revenue: [PT0S, PT0S]}
SELECT
  TRUNC(order_date, 'MM') AS month_start,
  country,
  SUM(revenue) AS revenue
FROM shop.daily_customer_revenue
WHERE order_date BETWEEN @start_ds AND @end_ds
GROUP BY TRUNC(order_date, 'MM'), country
