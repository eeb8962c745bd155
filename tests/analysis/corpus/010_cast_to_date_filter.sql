-- why: a filter on CAST(ts AS DATE) against date macros covers the window of a daily model
-- sources: {raw.orders: order_ts}
-- time_column: order_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.orders: [PT0S, PT0S]}
SELECT CAST(order_ts AS DATE) AS order_date, COUNT(*) AS orders
FROM raw.orders
WHERE CAST(order_ts AS DATE) BETWEEN @start_ds AND @end_ds
GROUP BY 1
