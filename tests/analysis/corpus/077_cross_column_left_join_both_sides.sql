-- why: a LEFT JOIN ON relation bounds the joined side before and after
-- sources: {raw.sessions: started_at, raw.events: ts}
-- time_column: started_at
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.sessions: [PT0S, PT0S], raw.events: [PT30M, PT5M]}
SELECT s.started_at, s.session_id, e.event_id
FROM raw.sessions AS s
LEFT JOIN raw.events AS e
  ON e.user_id = s.user_id
  AND e.ts >= s.started_at - INTERVAL 30 MINUTES
  AND e.ts < s.started_at + INTERVAL 5 MINUTES
