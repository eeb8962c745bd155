-- why: ROW_NUMBER partitioned by user sees only part of each user's history in a run
-- sources: {silver.events: event_date}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [window_function@12]
--   bounds: {silver.events: [PT0S, PT0S]}
SELECT
  event_date,
  user_id,
  ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY event_ts) AS rn
FROM silver.events
WHERE event_date BETWEEN @start_ds AND @end_ds
