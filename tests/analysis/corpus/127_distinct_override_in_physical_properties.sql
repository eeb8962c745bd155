-- why: allow_distinct (physical_properties in the MODEL header) admits an unaligned COUNT(DISTINCT), one interval per run
-- sources: {raw.page_views: viewed_at}
-- time_column: viewed_at
-- interval: 1d
-- overrides: [allow_distinct, allow_aggregates]
-- expect:
--   class: PerPartitionOnly
--   batch_limit: 1
--   reasons: [distinct@14, aggregate@17]
--   bounds: {raw.page_views: [PT0S, PT0S]}
WITH reach AS (
  SELECT
    country,
    COUNT(DISTINCT user_id) AS users
  FROM raw.page_views
  WHERE viewed_at BETWEEN @start_dt AND @end_dt
  GROUP BY country
)
SELECT p.viewed_at, p.user_id, r.users AS country_users
FROM raw.page_views AS p
JOIN reach AS r ON r.country = p.country
WHERE p.viewed_at BETWEEN @start_dt AND @end_dt
