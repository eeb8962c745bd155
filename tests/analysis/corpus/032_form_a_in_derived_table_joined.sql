-- why: a framed window in a derived table, joined to a dimension, keeps its reach
-- sources: {raw.events: ts, dim.devices: null}
-- time_column: ts
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [P7D, PT0S], dim.devices: null}
SELECT r.ts, r.device_id, d.site, r.weekly_max
FROM (
  SELECT
    ts,
    device_id,
    MAX(reading) OVER (PARTITION BY device_id ORDER BY ts RANGE INTERVAL 7 DAYS PRECEDING) AS weekly_max
  FROM raw.events
) AS r
JOIN dim.devices AS d
  ON d.device_id = r.device_id
