-- why: allow_aggregates admits a per-run aggregate, one interval per run
-- sources: {raw.sales: sold_at}
-- time_column: sold_at
-- interval: 1d
-- overrides: [allow_aggregates]
-- expect:
--   class: PerPartitionOnly
--   batch_limit: 1
--   reasons: [aggregate@12]
--   bounds: {raw.sales: [PT0S, PT0S]}
WITH total AS (
  SELECT SUM(amount) AS amount FROM raw.sales WHERE sold_at BETWEEN @start_dt AND @end_dt
)
SELECT s.sold_at, s.amount / t.amount AS share
FROM raw.sales AS s
CROSS JOIN total AS t
WHERE s.sold_at BETWEEN @start_dt AND @end_dt
