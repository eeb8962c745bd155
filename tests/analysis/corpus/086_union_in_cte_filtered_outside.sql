-- why: a filter on a UNION ALL's output column bounds every branch
-- sources: {raw.web_events: ts, raw.app_events: event_time}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.web_events: [PT1H, PT0S], raw.app_events: [PT1H, PT0S]}
WITH all_events AS (
  SELECT ts, user_id, 'web' AS source FROM raw.web_events
  UNION ALL
  SELECT event_time, user_id, 'app' FROM raw.app_events
)
SELECT ts, user_id, source
FROM all_events
WHERE ts >= @start_dt - INTERVAL 1 HOUR AND ts <= @end_dt
