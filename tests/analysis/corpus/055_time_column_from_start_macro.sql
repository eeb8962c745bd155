-- why: the SQLMesh one-row-per-run pattern; each run must be exactly one interval
-- sources: {raw.events: ts}
-- time_column: ds
-- interval: 1d
-- expect:
--   class: PerPartitionOnly
--   batch_limit: 1
--   reasons: [window_relative@11]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT
  @start_ds AS ds,
  COUNT(*) AS events
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
