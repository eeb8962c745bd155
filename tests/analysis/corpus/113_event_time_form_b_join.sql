-- why: Form B on the event-time column, a self-join reaching 30 minutes back in event time
-- sources: {raw.events: event_date}
-- event_time_columns: {raw.events: [event_ts, day]}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT30M, PT0S]}
--   columns: {raw.events: event_ts}
SELECT a.k, a.event_date, a.event_ts, COUNT(b.v) AS recent
FROM raw.events AS a
LEFT JOIN raw.events AS b
  ON b.k = a.k AND b.event_ts >= a.event_ts - INTERVAL '30' MINUTE AND b.event_ts < a.event_ts
GROUP BY a.k, a.event_date, a.event_ts
