-- why: dialect transpilation -- DuckDB double-colon casts and GROUP BY ALL
-- dialect: duckdb
-- sources: {raw.events: ts}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT2H, PT0S]}
SELECT ts::DATE AS event_date, device_id, count(*) AS events
FROM raw.events
WHERE ts >= @start_dt - INTERVAL '2 hours' AND ts < @end_dt
GROUP BY ALL
