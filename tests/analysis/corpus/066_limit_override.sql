-- why: allow_limit admits LIMIT with one interval per run
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- overrides: [allow_limit]
-- expect:
--   class: PerPartitionOnly
--   batch_limit: 1
--   reasons: [limit@15]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT ts, device_id, reading
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
ORDER BY reading DESC
LIMIT 100
