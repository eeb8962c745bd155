-- why: INTERVAL '1 day 12 hours' is 36 hours, shown in hours
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT36H, PT0S]}
SELECT ts, device_id
FROM raw.events
WHERE ts >= @start_ts - INTERVAL '1 day 12 hours'
  AND ts <= @end_ts
