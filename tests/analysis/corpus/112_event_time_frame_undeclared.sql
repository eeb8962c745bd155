-- why: the same frame without the event-time declaration is refused, naming the column and what to declare
-- sources: {raw.events: event_date}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [window_function@13]
--   bounds: {raw.events: [PT0S, PT0S]}
--   columns: {raw.events: event_date}
SELECT
  k,
  event_date,
  LAG(v) OVER (
    PARTITION BY k ORDER BY event_ts
    RANGE BETWEEN INTERVAL '30 minutes' PRECEDING AND CURRENT ROW
  ) AS prev_v
FROM raw.events
