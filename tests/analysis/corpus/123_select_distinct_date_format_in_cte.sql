-- why: a DISTINCT inside a CTE keyed by date_format(ts, 'yyyy-MM-dd') is seen through the CTE; admitted
-- sources: {raw.page_views: viewed_at}
-- time_column: view_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.page_views: [PT0S, PT0S]}
WITH daily_visitors AS (
  SELECT DISTINCT date_format(viewed_at, 'yyyy-MM-dd') AS day, user_id
  FROM raw.page_views
  WHERE viewed_at BETWEEN @start_dt AND @end_dt
)
SELECT CAST(day AS DATE) AS view_date, COUNT(*) AS visitors
FROM daily_visitors
GROUP BY day
