-- why: the frame needs 30 minutes before the window but the WHERE (applied first) cuts them off
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [lookback_truncated@14]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT
  ts,
  device_id,
  SUM(reading) OVER (PARTITION BY device_id ORDER BY ts RANGE BETWEEN INTERVAL 30 MINUTES PRECEDING AND CURRENT ROW) AS rolling
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
