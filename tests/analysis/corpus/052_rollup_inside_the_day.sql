-- why: the day stays a plain key, so every grouping set stays inside one day
-- sources: {raw.orders: order_ts}
-- time_column: order_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.orders: [PT0S, PT0S]}
SELECT CAST(order_ts AS DATE) AS order_date, country, channel, COUNT(*) AS orders
FROM raw.orders
WHERE order_ts BETWEEN @start_dt AND @end_dt
GROUP BY CAST(order_ts AS DATE), ROLLUP(country, channel)
