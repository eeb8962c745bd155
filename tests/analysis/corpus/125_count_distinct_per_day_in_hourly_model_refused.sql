-- why: a day is coarser than an hourly model's interval; HAVING and COUNT(DISTINCT) per day stay refused
-- sources: {raw.page_views: viewed_at}
-- time_column: view_date
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [distinct@11, aggregate@14, having@15]
--   bounds: {raw.page_views: [PT0S, PT0S]}
SELECT
  CAST(viewed_at AS DATE) AS view_date,
  COUNT(DISTINCT user_id) AS users
FROM raw.page_views
WHERE viewed_at BETWEEN @start_dt AND @end_dt
GROUP BY 1
HAVING COUNT(*) > 5
