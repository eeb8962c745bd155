-- why: Form B against the window macros on the event-time column; the output is the event time at day grain
-- sources: {raw.events: event_date}
-- event_time_columns: {raw.events: [event_ts, day]}
-- time_column: ds
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT2H, PT0S]}
--   columns: {raw.events: event_ts}
SELECT CAST(event_ts AS DATE) AS ds, k, SUM(v) OVER (PARTITION BY k ORDER BY event_ts RANGE BETWEEN INTERVAL 2 HOURS PRECEDING AND CURRENT ROW) AS s
FROM raw.events
WHERE event_ts >= @start_dt - INTERVAL 2 HOUR AND event_ts <= @end_dt
