-- why: daily COUNT(DISTINCT x) grouped by the day counts within one interval; admitted, no flag
-- sources: {raw.page_views: viewed_at}
-- time_column: view_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.page_views: [PT0S, PT0S]}
SELECT
  CAST(viewed_at AS DATE) AS view_date,
  COUNT(DISTINCT user_id) AS daily_users
FROM raw.page_views
WHERE viewed_at BETWEEN @start_dt AND @end_dt
GROUP BY 1
