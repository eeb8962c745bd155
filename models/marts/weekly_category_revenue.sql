MODEL (
  name shop.weekly_category_revenue,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column week_start
  ),
  -- Weeks start on Sunday; 2024-01-07 is the first Sunday of the data.
  start '2024-01-07',
  cron '@weekly',
  interval_unit 'week',
  grain [week_start, category],
  owner 'merchandising@example.com',
  tags [sales, merchandising],
  description 'Revenue per item category and week (Sunday to Saturday)',
  column_descriptions (
    week_start = 'Sunday that starts the week',
    category = 'Item category',
    order_lines = 'Order lines in the category',
    units = 'Units sold',
    revenue = 'Revenue, returns included',
    returned_revenue = 'Part of revenue from orders that were returned'
  ),
  audits (
    not_null(columns := (week_start, category, revenue)),
    positive_values(column := units)
  )
);

SELECT
  DATE_SUB(order_date, DAYOFWEEK(order_date) - 1) AS week_start,
  category,
  COUNT(order_id) AS order_lines,
  SUM(quantity) AS units,
  CAST(SUM(revenue) AS DECIMAL(18, 2)) AS revenue,
  CAST(SUM(CASE WHEN status = 'returned' THEN revenue ELSE 0 END) AS DECIMAL(18, 2)) AS returned_revenue
FROM shop.order_lines
WHERE
  order_date BETWEEN @start_ds AND @end_ds
GROUP BY
  DATE_SUB(order_date, DAYOFWEEK(order_date) - 1),
  category
