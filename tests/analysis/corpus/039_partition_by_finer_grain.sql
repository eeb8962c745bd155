-- why: an hour bucket lies inside one day, so an hourly partition on a daily model is whole
-- sources: {raw.events: ts}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT
  CAST(ts AS DATE) AS event_date,
  user_id,
  COUNT(*) OVER (PARTITION BY DATE_TRUNC('hour', ts), user_id) AS events_that_hour
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
