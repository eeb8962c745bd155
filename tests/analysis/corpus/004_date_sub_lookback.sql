-- why: date_sub on a date macro is a lookback in days
-- sources: {raw.visits: visit_date}
-- time_column: visit_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.visits: [P7D, PT0S]}
SELECT visit_date, user_id, page
FROM raw.visits
WHERE visit_date >= date_sub(@start_date, 7)
  AND visit_date <= @end_date
