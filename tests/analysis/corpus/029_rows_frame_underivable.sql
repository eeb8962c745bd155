-- why: a ROWS frame counts rows, not time, so the lookback cannot be derived
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
  AVG(reading) OVER (PARTITION BY device_id ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS avg_last_4
FROM raw.events
