-- why: HAVING on groups keyed by the day sees whole groups (a run reads whole days); admitted, no flag
-- sources: {raw.orders: order_ts}
-- time_column: order_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.orders: [PT0S, PT0S]}
SELECT CAST(order_ts AS DATE) AS order_date, customer_id, COUNT(*) AS orders
FROM raw.orders
WHERE order_ts BETWEEN @start_dt AND @end_dt
GROUP BY 1, 2
HAVING COUNT(*) > 10
