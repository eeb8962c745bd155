-- why: LIMIT keeps a subset that depends on how the window is cut
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [limit@13]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT ts, device_id, reading
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
ORDER BY reading DESC
LIMIT 100
