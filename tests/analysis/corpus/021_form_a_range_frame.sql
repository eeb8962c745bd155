-- why: Form A, a RANGE frame of 30 minutes ordered by the time column
-- sources: {silver.events_parsed: event_ts}
-- time_column: event_ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {silver.events_parsed: [PT30M, PT0S]}
SELECT
  device_id,
  event_ts,
  LAST_VALUE(event_ts) OVER (
    PARTITION BY device_id
    ORDER BY event_ts
    RANGE BETWEEN INTERVAL '30 minutes' PRECEDING AND CURRENT ROW
  ) AS last_ts
FROM silver.events_parsed
