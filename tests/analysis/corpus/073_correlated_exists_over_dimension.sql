-- why: a correlated EXISTS against a dimension is a row-by-row check
-- sources: {raw.events: ts, dim.blocklist: null}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT0S, PT0S], dim.blocklist: null}
SELECT e.ts, e.ip
FROM raw.events AS e
WHERE e.ts BETWEEN @start_dt AND @end_dt
  AND NOT EXISTS (SELECT 1 FROM dim.blocklist AS b WHERE b.ip = e.ip)
