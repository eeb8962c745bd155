-- why: SELECT DISTINCT that keeps the day dedupes within one interval; admitted, no flag
-- sources: {raw.page_views: viewed_at}
-- time_column: view_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.page_views: [PT0S, PT0S]}
SELECT DISTINCT
  CAST(viewed_at AS DATE) AS view_date,
  user_id
FROM raw.page_views
WHERE viewed_at BETWEEN @start_dt AND @end_dt
