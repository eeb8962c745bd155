-- why: the execution_ts macro is the time of the run, not of the data
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [nondeterministic@9]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT ts, device_id, @execution_ts AS processed_at
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
