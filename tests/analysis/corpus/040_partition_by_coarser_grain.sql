-- why: a month partition on a daily model spans many intervals
-- sources: {raw.events: ts}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [window_function@12]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT
  CAST(ts AS DATE) AS event_date,
  user_id,
  COUNT(*) OVER (PARTITION BY DATE_TRUNC('month', ts), user_id) AS events_that_month
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
