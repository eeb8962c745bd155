-- why: a bare LAG over the event-time column reaches an unknown distance and stays refused, naming the source
-- sources: {raw.events: event_date}
-- event_time_columns: {raw.events: [event_ts, day]}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [lookback_underivable@10]
SELECT k, event_date,
  LAG(v) OVER (PARTITION BY k ORDER BY event_ts) AS prev_v
FROM raw.events
