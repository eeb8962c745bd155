-- why: allow_having (with allow_aggregates) on groups without the day; per-run groups, one interval per run
-- sources: {raw.orders: order_ts}
-- time_column: order_ts
-- interval: 1d
-- overrides: [allow_having, allow_aggregates]
-- expect:
--   class: PerPartitionOnly
--   batch_limit: 1
--   reasons: [aggregate@15, having@16]
--   bounds: {raw.orders: [PT0S, PT0S]}
WITH big_customers AS (
  SELECT customer_id
  FROM raw.orders
  WHERE order_ts BETWEEN @start_dt AND @end_dt
  GROUP BY customer_id
  HAVING COUNT(*) > 10
)
SELECT o.order_ts, o.customer_id, o.amount
FROM raw.orders AS o
JOIN big_customers AS b ON b.customer_id = o.customer_id
WHERE o.order_ts BETWEEN @start_dt AND @end_dt
