-- why: COUNT(DISTINCT) per hour in a daily model; an hour is finer than the day, so each group is in one interval
-- sources: {raw.page_views: viewed_at}
-- time_column: view_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.page_views: [PT0S, PT0S]}
SELECT
  CAST(viewed_at AS DATE) AS view_date,
  DATE_TRUNC('hour', viewed_at) AS view_hour,
  COUNT(DISTINCT user_id) AS users
FROM raw.page_views
WHERE viewed_at BETWEEN @start_dt AND @end_dt
GROUP BY DATE_TRUNC('hour', viewed_at), CAST(viewed_at AS DATE)
