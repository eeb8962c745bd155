-- why: OVER w takes its PARTITION BY from the WINDOW clause
-- sources: {silver.events: event_date}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {silver.events: [PT0S, PT0S]}
SELECT
  event_date,
  user_id,
  SUM(amount) OVER w AS running_amount
FROM silver.events
WHERE event_date BETWEEN @start_ds AND @end_ds
WINDOW w AS (PARTITION BY event_date, user_id ORDER BY event_ts)
