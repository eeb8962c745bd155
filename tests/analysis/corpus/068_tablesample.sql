-- why: TABLESAMPLE picks different rows on every run
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [nondeterministic@10]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT ts, device_id
FROM raw.events TABLESAMPLE (10 PERCENT)
WHERE ts BETWEEN @start_dt AND @end_dt
