-- why: the filter reads exactly what the frame needs
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT30M, PT0S]}
SELECT
  ts,
  device_id,
  SUM(reading) OVER (PARTITION BY device_id ORDER BY ts RANGE BETWEEN INTERVAL 30 MINUTES PRECEDING AND CURRENT ROW) AS rolling
FROM raw.events
WHERE ts BETWEEN @start_dt - INTERVAL 30 MINUTES AND @end_dt
