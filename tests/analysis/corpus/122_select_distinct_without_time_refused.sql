-- why: SELECT DISTINCT without a time key dedupes across intervals; the fix names a spelling SQLMesh loads
-- sources: {raw.page_views: viewed_at}
-- time_column: viewed_at
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [distinct@10]
--   bounds: {raw.page_views: [PT0S, PT0S]}
WITH visitors AS (
  SELECT DISTINCT user_id FROM raw.page_views WHERE viewed_at BETWEEN @start_dt AND @end_dt
)
SELECT p.viewed_at, p.user_id, p.url
FROM raw.page_views AS p
JOIN visitors AS v ON v.user_id = p.user_id
WHERE p.viewed_at BETWEEN @start_dt AND @end_dt
