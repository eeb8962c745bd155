-- why: dialect transpilation -- BigQuery DATE_SUB with an INTERVAL on a date column
-- dialect: bigquery
-- sources: {raw.visits: visit_date}
-- time_column: visit_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.visits: [P2D, PT0S]}
SELECT visit_date, user_id
FROM raw.visits
WHERE visit_date BETWEEN DATE_SUB(@start_date, INTERVAL 2 DAY) AND @end_date
