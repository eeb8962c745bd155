-- why: a bare LAG reaches back an unknown distance
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [lookback_underivable@12]
--   bounds: {}
SELECT
  ts,
  device_id,
  LAG(ts) OVER (PARTITION BY device_id ORDER BY ts) AS previous_ts
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
