-- why: comparisons written macro-first are read the same way
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT15M, PT0S]}
SELECT ts, device_id
FROM raw.events
WHERE @start_dt - INTERVAL 15 MINUTES <= ts
  AND @end_dt >= ts
