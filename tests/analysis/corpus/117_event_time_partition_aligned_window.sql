-- why: a window partitioned by the partition column is whole in a run, ordered by event time or not
-- sources: {raw.events: event_date}
-- event_time_columns: {raw.events: [event_ts, day]}
-- time_column: event_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT k, event_date, ROW_NUMBER() OVER (PARTITION BY event_date, k ORDER BY event_ts) AS rn
FROM raw.events
