-- why: a CTE read twice is two references; the bound is the union of both
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT30M, PT0S]}
WITH clicks AS (
  SELECT ts, user_id, url FROM raw.events WHERE kind = 'click'
)
SELECT a.ts, a.user_id, COUNT(b.url) AS clicks_in_last_30_minutes
FROM clicks AS a
JOIN clicks AS b
  ON b.user_id = a.user_id
  AND b.ts BETWEEN a.ts - INTERVAL 30 MINUTES AND a.ts
WHERE a.ts BETWEEN @start_dt AND @end_dt
GROUP BY a.ts, a.user_id
