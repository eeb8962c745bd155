-- why: allow_window_functions admits the window; runs then cover one interval each
-- sources: {silver.events: event_date}
-- time_column: event_date
-- interval: 1d
-- overrides: [allow_window_functions]
-- expect:
--   class: PerPartitionOnly
--   batch_limit: 1
--   reasons: [window_function@14]
--   bounds: {silver.events: [PT0S, PT0S]}
SELECT
  event_date,
  user_id,
  ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY event_ts) AS rn
FROM silver.events
WHERE event_date BETWEEN @start_ds AND @end_ds
