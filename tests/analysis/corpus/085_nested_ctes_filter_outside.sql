-- why: three levels of CTEs; the filter in the last one reaches the table in the first
-- sources: {raw.events: ts}
-- time_column: event_hour
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT0S, PT0S]}
WITH base AS (
  SELECT * FROM raw.events
), cleaned AS (
  SELECT ts, device_id, reading FROM base WHERE reading IS NOT NULL
), hourly AS (
  SELECT DATE_TRUNC('hour', ts) AS event_hour, device_id, AVG(reading) AS avg_reading
  FROM cleaned
  WHERE ts BETWEEN @start_dt AND @end_dt
  GROUP BY 1, 2
)
SELECT event_hour, device_id, avg_reading FROM hourly
