-- why: allow_subqueries admits it, one interval per run
-- sources: {raw.sales: sold_at}
-- time_column: sold_at
-- interval: 1d
-- overrides: [allow_subqueries]
-- expect:
--   class: PerPartitionOnly
--   batch_limit: 1
--   reasons: [subquery@13]
--   bounds: {raw.sales: [PT0S, PT0S]}
SELECT sold_at, amount
FROM raw.sales
WHERE amount > (SELECT AVG(amount) FROM raw.sales WHERE sold_at BETWEEN @start_dt AND @end_dt)
  AND sold_at BETWEEN @start_dt AND @end_dt
