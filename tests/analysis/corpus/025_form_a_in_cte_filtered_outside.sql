-- why: a filter applied after a framed window (outer scope) is widened by the frame
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT1H, PT0S]}
WITH rolling AS (
  SELECT
    ts,
    device_id,
    AVG(reading) OVER (PARTITION BY device_id ORDER BY ts RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW) AS avg_1h
  FROM raw.events
)
SELECT ts, device_id, avg_1h
FROM rolling
WHERE ts BETWEEN @start_dt AND @end_dt
