-- why: a 30-minute RANGE frame ordered by the declared event-time column of a day-partitioned source
-- sources: {raw.events: event_date}
-- event_time_columns: {raw.events: [event_ts, day]}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT30M, PT0S]}
--   columns: {raw.events: event_ts}
SELECT
  k,
  event_date,
  event_ts,
  LAG(v) OVER (
    PARTITION BY k ORDER BY event_ts
    RANGE BETWEEN INTERVAL '30 minutes' PRECEDING AND CURRENT ROW
  ) AS prev_v
FROM raw.events
