-- why: a declared lookback of 2 intervals stands in for the underivable bound
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- declared_lookback: 2
-- expect:
--   class: FullyBatchSafe
--   reasons: [declared_lookback]
--   bounds: {raw.events: [PT2H, PT0S]}
SELECT
  ts,
  device_id,
  LAG(ts) OVER (PARTITION BY device_id ORDER BY ts) AS previous_ts
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
