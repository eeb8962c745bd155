-- why: x < @end_dt is a hair narrower than the window and needs no lookahead
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT ts, device_id
FROM raw.events
WHERE ts >= @start_dt AND ts < @end_dt
