-- why: timestamps between @start_dt and @end_dt, truncated to the hour in the output
-- sources: {raw.orders: order_ts}
-- time_column: order_hour
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.orders: [PT0S, PT0S]}
SELECT
  DATE_TRUNC('HOUR', order_ts) AS order_hour,
  channel,
  COUNT(order_id) AS orders
FROM raw.orders
WHERE order_ts BETWEEN @start_dt AND @end_dt
GROUP BY DATE_TRUNC('HOUR', order_ts), channel
