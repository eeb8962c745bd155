-- why: windows, aggregates and DISTINCT inside a subquery over dimensions only are admitted
-- sources: {raw.events: ts, dim.tiers: null}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT0S, PT0S], dim.tiers: null}
SELECT ts, user_id
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
  AND tier IN (
    SELECT DISTINCT tier FROM (
      SELECT tier, RANK() OVER (ORDER BY price DESC) AS r FROM dim.tiers
    ) AS ranked
    WHERE r <= 2
  )
