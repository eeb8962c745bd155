-- why: WITH RECURSIVE cannot be analysed
-- sources: {raw.edges: ts}
-- time_column: ts
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [recursive_cte@9]
--   bounds: {raw.edges: [PT0S, PT0S]}
WITH RECURSIVE reach AS (
  SELECT src, dst, ts FROM raw.edges WHERE ts BETWEEN @start_dt AND @end_dt
  UNION ALL
  SELECT r.src, e.dst, e.ts FROM reach AS r JOIN raw.edges AS e ON e.src = r.dst AND e.ts = r.ts
)
SELECT src, dst, ts FROM reach
