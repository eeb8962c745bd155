-- why: a window inside a CTE is checked where it is, with its own line
-- sources: {raw.logins: login_ts, dim.users: null}
-- time_column: login_date
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [window_function@13]
--   bounds: {raw.logins: [PT0S, PT0S], dim.users: null}
WITH ranked AS (
  SELECT
    login_ts,
    user_id,
    ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY login_ts) AS login_number
  FROM raw.logins
  WHERE login_ts BETWEEN @start_dt AND @end_dt
)
SELECT CAST(r.login_ts AS DATE) AS login_date, r.user_id, u.plan, r.login_number
FROM ranked AS r
JOIN dim.users AS u
  ON u.user_id = r.user_id
