-- why: only a lower bound is written; the output clamp supplies the upper one
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT ts, device_id
FROM raw.events
WHERE ts >= @start_dt
