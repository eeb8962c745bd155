-- why: numbers added to @start_millis are milliseconds
-- sources: {raw.clicks: ms}
-- time_column: ms
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.clicks: [PT1M, PT0S]}
SELECT ms, session_id
FROM raw.clicks
WHERE ms BETWEEN @start_millis - 60000 AND @end_millis
