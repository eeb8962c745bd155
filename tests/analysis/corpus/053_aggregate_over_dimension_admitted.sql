-- why: aggregates over a table read in full are the same on every run
-- sources: {raw.signups: signup_ts, dim.countries: null}
-- time_column: signup_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.signups: [PT0S, PT0S], dim.countries: null}
WITH region_sizes AS (
  SELECT region, COUNT(*) AS countries FROM dim.countries GROUP BY region
)
SELECT CAST(s.signup_ts AS DATE) AS signup_date, s.user_id, r.countries
FROM raw.signups AS s
JOIN dim.countries AS c ON c.code = s.country
JOIN region_sizes AS r ON r.region = c.region
WHERE s.signup_ts BETWEEN @start_dt AND @end_dt
