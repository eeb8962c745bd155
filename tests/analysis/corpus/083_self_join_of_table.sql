-- why: a table joined to itself without a CTE, bounded the same way
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [P1D, PT0S]}
SELECT cur.ts, cur.user_id, prev.ts AS previous_visit
FROM raw.events AS cur
LEFT JOIN raw.events AS prev
  ON prev.user_id = cur.user_id
  AND prev.ts >= cur.ts - INTERVAL 1 DAY
  AND prev.ts < cur.ts
WHERE cur.ts BETWEEN @start_dt AND @end_dt
