-- why: LEAD reaches forward; a declared lookback only covers data before the window
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- declared_lookback: 3
-- expect:
--   class: Refused
--   reasons: [lookback_underivable@13]
--   bounds: {}
SELECT
  ts,
  device_id,
  LEAD(ts) OVER (PARTITION BY device_id ORDER BY ts) AS next_ts
FROM raw.events
