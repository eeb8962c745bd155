-- why: dialect transpilation -- BigQuery TIMESTAMP_SUB with an interval of 36 hours
-- dialect: bigquery
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT36H, PT0S]}
SELECT ts, device_id
FROM raw.events
WHERE ts BETWEEN TIMESTAMP_SUB(@start_dt, INTERVAL 36 HOUR) AND @end_dt
