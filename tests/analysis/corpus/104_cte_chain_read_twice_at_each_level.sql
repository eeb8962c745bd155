-- why: every use of every CTE is its own reference, at any depth
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT1H, PT0S]}
WITH a AS (
  SELECT ts, device_id FROM raw.events
), b AS (
  SELECT x.ts, x.device_id
  FROM a AS x
  JOIN a AS y ON y.device_id = x.device_id AND y.ts BETWEEN x.ts - INTERVAL 1 HOUR AND x.ts
)
SELECT b.ts, b.device_id
FROM b
JOIN b AS c ON c.device_id = b.device_id AND c.ts = b.ts
WHERE b.ts BETWEEN @start_dt AND @end_dt
