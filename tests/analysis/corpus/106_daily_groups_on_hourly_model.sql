-- why: a daily group on an hourly model spans 24 intervals; joining it back on the day reads whole days
-- sources: {raw.orders: order_ts}
-- time_column: order_hour
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [aggregate@15]
--   bounds: {raw.orders: [P1D, P1D]}
SELECT
  DATE_TRUNC('HOUR', order_ts) AS order_hour,
  COUNT(*) OVER (PARTITION BY DATE_TRUNC('HOUR', order_ts)) AS orders_that_hour,
  daily.orders AS orders_that_day
FROM raw.orders
JOIN (
  SELECT CAST(order_ts AS DATE) AS order_date, COUNT(*) AS orders FROM raw.orders GROUP BY 1
) AS daily
  ON daily.order_date = CAST(order_ts AS DATE)
WHERE order_ts BETWEEN @start_dt AND @end_dt
