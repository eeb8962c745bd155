-- why: the join needs events from before the window but WHERE keeps only the window
-- sources: {raw.sessions: started_at, raw.events: ts}
-- time_column: started_at
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [lookback_truncated@15]
--   bounds: {raw.sessions: [PT0S, PT0S], raw.events: [PT0S, PT0S]}
SELECT s.started_at, s.session_id, e.event_id
FROM raw.sessions AS s
JOIN raw.events AS e
  ON e.user_id = s.user_id
  AND e.ts BETWEEN s.started_at - INTERVAL 2 HOURS AND s.started_at
WHERE s.started_at BETWEEN @start_dt AND @end_dt
  AND e.ts BETWEEN @start_dt AND @end_dt
