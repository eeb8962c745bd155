-- why: a total over everything a run reads, joined back to each row, changes with the run's size
-- sources: {raw.sales: sold_at}
-- time_column: sold_at
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [aggregate@10]
--   bounds: {raw.sales: [PT0S, PT0S]}
WITH total AS (
  SELECT SUM(amount) AS amount FROM raw.sales WHERE sold_at BETWEEN @start_dt AND @end_dt
)
SELECT s.sold_at, s.amount / t.amount AS share
FROM raw.sales AS s
CROSS JOIN total AS t
WHERE s.sold_at BETWEEN @start_dt AND @end_dt
