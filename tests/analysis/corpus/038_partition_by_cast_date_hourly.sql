-- why: on an hourly model a day spans 24 intervals, so a day partition is not whole in a run
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [window_function@12]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT
  ts,
  user_id,
  RANK() OVER (PARTITION BY CAST(ts AS DATE) ORDER BY score DESC) AS daily_rank
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
