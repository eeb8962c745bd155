-- why: date_add on the end macro reads a day after the window
-- sources: {raw.visits: visit_date}
-- time_column: visit_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.visits: [PT0S, P1D]}
SELECT visit_date, user_id
FROM raw.visits
WHERE visit_date BETWEEN @start_ds AND date_add(@end_date, 1)
