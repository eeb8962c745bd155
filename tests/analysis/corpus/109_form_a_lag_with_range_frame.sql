-- why: smelt's Form A example -- the RANGE frame states how far LAG looks back
-- sources: {silver.events_parsed: event_ts}
-- time_column: event_ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {silver.events_parsed: [PT30M, PT0S]}
SELECT
  device_id,
  event_ts,
  LAG(event_ts) OVER (
    PARTITION BY device_id
    ORDER BY event_ts
    RANGE BETWEEN INTERVAL '30 minutes' PRECEDING AND CURRENT ROW
  ) AS prev_ts
FROM silver.events_parsed
