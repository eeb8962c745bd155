-- why: a lower bound anchored on the end covers at most seven days per run
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1d
-- expect:
--   class: BoundedSafe
--   batch_limit: 7
--   reasons: [window_relative@12]
--   bounds: {raw.events: [P6D, PT0S]}
SELECT ts, user_id
FROM raw.events
WHERE ts >= @end_dt - INTERVAL 7 DAY
  AND ts <= @end_dt
