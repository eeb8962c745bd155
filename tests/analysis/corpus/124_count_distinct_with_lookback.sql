-- why: a read one day wider than the window adds only a whole earlier day's groups, dropped by the clamp
-- sources: {raw.page_views: viewed_at}
-- time_column: view_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.page_views: [P1D, PT0S]}
SELECT
  CAST(viewed_at AS DATE) AS view_date,
  COUNT(DISTINCT user_id) AS users,
  COUNT(DISTINCT url) AS pages
FROM raw.page_views
WHERE viewed_at BETWEEN @start_dt - INTERVAL 1 DAY AND @end_dt
GROUP BY CAST(viewed_at AS DATE)
HAVING COUNT(*) > 1
