-- why: each non-deterministic call is a separate reason with its own line
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [nondeterministic@11, nondeterministic@12, nondeterministic@13, nondeterministic@14, nondeterministic@15]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT
  ts,
  RAND() AS r,
  uuid() AS row_id,
  now() AS loaded_at,
  current_date() AS load_date,
  monotonically_increasing_id() AS seq
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
