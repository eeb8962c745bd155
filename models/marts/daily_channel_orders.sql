MODEL (
  name shop.daily_channel_orders,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column order_date
  ),
  start '2024-12-01',
  cron '@daily',
  grain [order_date, channel],
  owner 'ops-team@example.com',
  tags [operations],
  description 'Orders per day and channel, rolled up from the hourly counts',
  column_descriptions (
    order_date = 'Day (UTC)',
    channel = 'web, app or store',
    orders = 'Orders placed that day, cancelled ones included',
    cancelled_orders = 'Of those, orders that were cancelled',
    cancellation_rate = 'cancelled_orders / orders',
    busiest_hour_orders = 'Orders in the busiest hour of the day',
    active_hours = 'Hours of the day with at least one order'
  ),
  audits (
    not_null(columns := (order_date, channel, orders)),
    accepted_range(column := cancellation_rate, min_v := 0, max_v := 1)
  )
);

-- Reads an hourly model into a daily one: the day's window covers its 24 hourly intervals.
SELECT
  CAST(order_hour AS DATE) AS order_date,
  channel,
  SUM(orders) AS orders,
  SUM(cancelled_orders) AS cancelled_orders,
  ROUND(SUM(cancelled_orders) / NULLIF(SUM(orders), 0), 4) AS cancellation_rate,
  MAX(orders) AS busiest_hour_orders,
  COUNT(order_hour) AS active_hours
FROM shop.hourly_orders
WHERE
  order_hour BETWEEN @start_dt AND @end_dt
GROUP BY
  CAST(order_hour AS DATE),
  channel
