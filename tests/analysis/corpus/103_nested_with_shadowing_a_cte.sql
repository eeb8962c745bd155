-- why: an inner WITH reusing an outer CTE's name still reads the outer one inside its own body
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT1H, PT0S]}
WITH e AS (
  SELECT ts, device_id FROM raw.events
)
SELECT ts, device_id
FROM (
  WITH e AS (SELECT ts, device_id FROM e WHERE ts >= @start_dt - INTERVAL 1 HOUR)
  SELECT * FROM e
) AS recent
WHERE ts <= @end_dt
