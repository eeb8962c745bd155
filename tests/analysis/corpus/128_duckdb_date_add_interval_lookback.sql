-- why: DuckDB's DATE_ADD of a negative interval, and a shown DATE less an interval, shift the window's start
-- dialect: duckdb
-- sources: {raw.events: ts, raw.visits: visit_date}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [P7D, PT0S], raw.visits: [P3D, PT0S]}
SELECT e.ts::DATE AS event_date, e.device_id, COUNT(v.visit_date) AS visits
FROM raw.events AS e
LEFT JOIN raw.visits AS v
  ON v.device_id = e.device_id
  AND v.visit_date >= CAST(@start_ds AS DATE) - INTERVAL 3 DAY
  AND v.visit_date < @end_ds
WHERE e.ts >= DATE_ADD(@start_dt, INTERVAL -7 DAY) AND e.ts < @end_dt
GROUP BY ALL
