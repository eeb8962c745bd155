-- why: GROUP BY an alias of the hour bucket is grouping by the bucket
-- sources: {raw.orders: order_ts}
-- time_column: order_hour
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.orders: [PT0S, PT0S]}
SELECT DATE_TRUNC('HOUR', order_ts) AS order_hour, channel AS sales_channel, COUNT(*) AS orders
FROM raw.orders
WHERE order_ts BETWEEN @start_dt AND @end_dt
GROUP BY order_hour, sales_channel
