-- why: PARTITION BY the partition column plus another key (superset) is admitted
-- sources: {silver.events: event_date}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {silver.events: [PT0S, PT0S]}
SELECT
  event_date,
  device_id,
  ROW_NUMBER() OVER (PARTITION BY device_id, event_date ORDER BY event_ts) AS nth_event
FROM silver.events
WHERE event_date BETWEEN @start_ds AND @end_ds
