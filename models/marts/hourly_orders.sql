MODEL (
  name shop.hourly_orders,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column order_hour
  ),
  start '2024-12-01',
  cron '@hourly',
  interval_unit 'hour',
  grain [order_hour, channel],
  owner 'ops-team@example.com',
  tags [operations],
  description 'Orders per hour and channel, for the live operations dashboard',
  column_descriptions (
    order_hour = 'Start of the hour (UTC)',
    channel = 'web, app or store',
    orders = 'Orders placed in the hour, cancelled ones included',
    cancelled_orders = 'Of those, orders that were cancelled',
    returned_orders = 'Of those, orders that were returned',
    first_order_ts = 'Time of the first order in the hour',
    last_order_ts = 'Time of the last order in the hour'
  ),
  audits (
    not_null(columns := (order_hour, channel, orders)),
    positive_values(column := orders)
  )
);

SELECT
  DATE_TRUNC('HOUR', order_ts) AS order_hour,
  channel,
  COUNT(order_id) AS orders,
  SUM(CASE WHEN status = 'cancelled' THEN 1 ELSE 0 END) AS cancelled_orders,
  SUM(CASE WHEN status = 'returned' THEN 1 ELSE 0 END) AS returned_orders,
  MIN(order_ts) AS first_order_ts,
  MAX(order_ts) AS last_order_ts
FROM raw.orders
WHERE
  order_ts BETWEEN @start_dt AND @end_dt
GROUP BY
  DATE_TRUNC('HOUR', order_ts),
  channel
