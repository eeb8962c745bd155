-- why: Form B in the paired >= / < form, with an offset on both ends
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT2H, PT1H]}
SELECT ts, device_id, reading
FROM raw.events
WHERE ts >= @start_dt - INTERVAL '2' HOUR
  AND ts < @end_dt + INTERVAL 1 HOUR
