-- why: dialect transpilation -- Snowflake's DATEADD(unit, n, x) is read like Spark's date_sub
-- dialect: snowflake
-- sources: {raw.visits: visit_date}
-- time_column: visit_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.visits: [P3D, PT0S]}
SELECT visit_date, user_id
FROM raw.visits
WHERE visit_date >= DATEADD(day, -3, @start_ds)
  AND visit_date <= @end_ds
