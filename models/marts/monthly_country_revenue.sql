MODEL (
  name shop.monthly_country_revenue,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column month_start
  ),
  start '2024-01-01',
  cron '@monthly',
  interval_unit 'month',
  grain [month_start, country],
  owner 'finance@example.com',
  tags [sales, finance],
  description 'Revenue per customer country and calendar month',
  column_descriptions (
    month_start = 'First day of the month',
    country = 'Customer country code (NULL for unknown customers)',
    orders = 'Non-cancelled orders',
    units = 'Units sold',
    revenue = 'Revenue, returns included',
    business_revenue = 'Part of revenue from business customers',
    returned_revenue = 'Part of revenue from orders that were returned'
  ),
  audits (
    not_null(columns := (month_start, revenue)),
    positive_values(column := orders)
  )
);

SELECT
  TRUNC(order_date, 'MM') AS month_start,
  country,
  SUM(orders) AS orders,
  SUM(units) AS units,
  CAST(SUM(revenue) AS DECIMAL(18, 2)) AS revenue,
  CAST(SUM(CASE WHEN segment = 'business' THEN revenue ELSE 0 END) AS DECIMAL(18, 2)) AS business_revenue,
  CAST(SUM(returned_revenue) AS DECIMAL(18, 2)) AS returned_revenue
FROM shop.daily_customer_revenue
WHERE
  order_date BETWEEN @start_ds AND @end_ds
GROUP BY
  TRUNC(order_date, 'MM'),
  country
