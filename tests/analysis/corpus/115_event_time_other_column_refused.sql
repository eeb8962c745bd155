-- why: a frame over a column that is neither the time column nor the declared event-time column
-- sources: {raw.events: event_date}
-- event_time_columns: {raw.events: [event_ts, day]}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [window_function@11]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT k, event_date,
  SUM(v) OVER (PARTITION BY k ORDER BY ingested_ts RANGE BETWEEN INTERVAL '30 minutes' PRECEDING AND CURRENT ROW) AS s
FROM raw.events
