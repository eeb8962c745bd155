-- why: CAST(ts AS DATE) is the time column at the model's grain, so windows partitioned by it are whole
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT
  ts,
  user_id,
  RANK() OVER (PARTITION BY CAST(ts AS DATE) ORDER BY score DESC) AS daily_rank
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
