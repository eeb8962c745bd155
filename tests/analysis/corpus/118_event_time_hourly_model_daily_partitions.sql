-- why: an hourly model over a day-partitioned source; the bound stays in event time (the hour and 30 minutes)
-- sources: {raw.events: event_date}
-- event_time_columns: {raw.events: [event_ts, day]}
-- time_column: hour_ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT30M, PT0S]}
--   columns: {raw.events: event_ts}
SELECT DATE_TRUNC('HOUR', event_ts) AS hour_ts, k,
  SUM(v) OVER (PARTITION BY k ORDER BY event_ts RANGE BETWEEN INTERVAL '30 minutes' PRECEDING AND CURRENT ROW) AS s
FROM raw.events
