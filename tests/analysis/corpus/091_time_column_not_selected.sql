-- why: the output must carry the time column the framework clamps on
-- sources: {raw.events: ts}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [time_column@9]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT ts, device_id
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
