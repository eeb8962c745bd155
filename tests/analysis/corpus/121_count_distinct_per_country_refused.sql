-- why: COUNT(DISTINCT) grouped by a dimension only; a group spans every interval of the window
-- sources: {raw.page_views: viewed_at}
-- time_column: viewed_at
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [distinct@12, aggregate@15]
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
