MODEL (
  name shop.customer_lifetime,
  kind FULL,
  cron '@daily',
  grain customer_id,
  owner 'data-team@example.com',
  tags [customers],
  description 'Every customer who has ordered, with their first and last order day and lifetime value',
  column_descriptions (
    customer_id = 'The customer',
    country = 'Customer country code',
    segment = 'consumer or business',
    first_order_date = 'Day of the first non-cancelled order',
    last_order_date = 'Day of the latest non-cancelled order',
    active_days = 'Days with at least one order',
    orders = 'Non-cancelled orders',
    lifetime_revenue = 'Revenue of all those orders, returns included'
  ),
  audits (
    unique_values(columns := (customer_id)),
    not_null(columns := (customer_id, first_order_date, lifetime_revenue))
  )
);

SELECT
  customer_id,
  country,
  segment,
  MIN(order_date) AS first_order_date,
  MAX(order_date) AS last_order_date,
  COUNT(order_date) AS active_days,
  SUM(orders) AS orders,
  CAST(SUM(revenue) AS DECIMAL(18, 2)) AS lifetime_revenue
FROM shop.daily_customer_revenue
GROUP BY
  customer_id,
  country,
  segment
