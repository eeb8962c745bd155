-- why: Form B cross-column -- events within 30 minutes before a session start
-- sources: {raw.sessions: started_at, raw.events: ts}
-- time_column: started_at
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.sessions: [PT0S, PT0S], raw.events: [PT30M, PT0S]}
SELECT s.started_at, s.session_id, COUNT(e.event_id) AS events_before_start
FROM raw.sessions AS s
JOIN raw.events AS e
  ON e.user_id = s.user_id
  AND e.ts BETWEEN s.started_at - INTERVAL 30 MINUTES AND s.started_at
WHERE s.started_at BETWEEN @start_dt AND @end_dt
GROUP BY s.started_at, s.session_id
