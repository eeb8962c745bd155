MODEL (
  name shop.daily_customer_revenue,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column order_date
  ),
  start '2024-01-01',
  cron '@daily',
  grain [order_date, customer_id],
  owner 'data-team@example.com',
  tags [sales, customers],
  description 'Revenue per customer and day, with the customer country and segment',
  column_descriptions (
    order_date = 'Day (UTC)',
    customer_id = 'The customer',
    country = 'Customer country code (NULL if the customer is unknown)',
    segment = 'consumer or business (NULL if the customer is unknown)',
    orders = 'Non-cancelled orders placed that day',
    order_lines = 'Lines of those orders',
    units = 'Units bought',
    revenue = 'Revenue of those orders, returns included',
    returned_revenue = 'Part of revenue from orders that were returned'
  ),
  audits (
    not_null(columns := (order_date, customer_id, revenue)),
    positive_values(column := orders)
  )
);

SELECT
  ol.order_date,
  ol.customer_id,
  c.country,
  c.segment,
  -- Every order has exactly one first line: counting those counts orders without DISTINCT.
  SUM(CASE WHEN ol.line_no = 1 THEN 1 ELSE 0 END) AS orders,
  COUNT(ol.order_id) AS order_lines,
  SUM(ol.quantity) AS units,
  CAST(SUM(ol.revenue) AS DECIMAL(18, 2)) AS revenue,
  CAST(SUM(CASE WHEN ol.status = 'returned' THEN ol.revenue ELSE 0 END) AS DECIMAL(18, 2)) AS returned_revenue
FROM shop.order_lines AS ol
LEFT JOIN shop.customers AS c
  ON c.customer_id = ol.customer_id
WHERE
  ol.order_date BETWEEN @start_ds AND @end_ds
GROUP BY
  ol.order_date,
  ol.customer_id,
  c.country,
  c.segment
