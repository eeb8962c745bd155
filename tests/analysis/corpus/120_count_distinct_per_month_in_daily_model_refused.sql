-- why: COUNT(DISTINCT) per month in a daily model; a month spans many intervals, even as the time column
-- sources: {raw.page_views: viewed_at}
-- time_column: month_start
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [distinct@11, aggregate@14]
--   bounds: {raw.page_views: [PT0S, PT0S]}
SELECT
  DATE_TRUNC('month', viewed_at) AS month_start,
  COUNT(DISTINCT user_id) AS users
FROM raw.page_views
WHERE viewed_at BETWEEN @start_dt AND @end_dt
GROUP BY 1
