MODEL (
  name shop.order_lines,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column order_date
  ),
  start '2024-01-01',
  cron '@daily',
  grain [order_id, line_no],
  owner 'data-team@example.com',
  tags [sales, core],
  description 'One row per line of a non-cancelled order, priced with the current item catalogue',
  column_descriptions (
    order_id = 'The order',
    line_no = 'Position of the line in its order, from 1',
    order_date = 'Day the order was placed (UTC)',
    customer_id = 'Customer who placed the order',
    item_id = 'Item bought',
    category = 'Category of the item',
    quantity = 'Units bought, 1 to 5',
    unit_price = 'Catalogue price of one unit',
    revenue = 'quantity * unit price',
    status = 'placed, shipped or returned (cancelled orders are left out)',
    channel = 'web, app or store'
  ),
  audits (
    not_null(columns := (order_id, line_no, order_date, item_id, revenue)),
    unique_combination_of_columns(columns := (order_id, line_no)),
    accepted_range(column := quantity, min_v := 1, max_v := 5)
  )
);

SELECT
  o.order_id,
  li.line_no,
  o.order_date,
  o.customer_id,
  li.item_id,
  it.category,
  li.quantity,
  it.unit_price,
  CAST(li.quantity * it.unit_price AS DECIMAL(18, 2)) AS revenue,
  o.status,
  o.channel
FROM raw.orders AS o
JOIN raw.order_items AS li
  ON li.order_id = o.order_id AND li.order_date = o.order_date
JOIN raw.items AS it
  ON it.item_id = li.item_id
WHERE
  o.order_ts BETWEEN @start_dt AND @end_dt
  AND li.order_ts BETWEEN @start_dt AND @end_dt
  AND o.status <> 'cancelled'
