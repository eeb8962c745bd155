-- why: every clock or random function, including unix_timestamp() without an argument
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [nondeterministic@11, nondeterministic@12, nondeterministic@13, nondeterministic@14, nondeterministic@15, nondeterministic@16]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT
  ts,
  random() AS a,
  current_time() AS b,
  localtimestamp() AS c,
  unix_timestamp() AS d,
  shuffle(tags) AS e,
  current_timestamp AS f,
  unix_timestamp(ts) AS deterministic_epoch
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
