-- why: an IN subquery that reads only a dimension table is the same on every run
-- sources: {raw.events: ts, dim.users: null}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT0S, PT0S], dim.users: null}
SELECT ts, user_id, action
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
  AND user_id IN (SELECT user_id FROM dim.users WHERE NOT is_test)
