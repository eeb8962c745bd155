-- why: PARTITION BY the partition column (equality) is admitted
-- sources: {silver.events: event_date}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {silver.events: [PT0S, PT0S]}
SELECT
  event_date,
  user_id,
  FIRST_VALUE(user_id) OVER (PARTITION BY event_date ORDER BY event_ts) AS first_user
FROM silver.events
WHERE event_date BETWEEN @start_ds AND @end_ds
