-- why: ordered by a sequence number, the window is not a lookback at all
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [window_function@12]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT
  ts,
  device_id,
  LAG(reading) OVER (PARTITION BY device_id ORDER BY sequence_no) AS previous_reading
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
