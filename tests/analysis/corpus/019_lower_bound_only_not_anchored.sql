-- why: a lower bound alone on a table the output does not derive from reads everything after the window
-- sources: {raw.events: ts, raw.devices_seen: seen_at}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [lookback_underivable@11]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT e.ts, e.device_id, d.model
FROM raw.events AS e
JOIN raw.devices_seen AS d
  ON d.device_id = e.device_id
WHERE e.ts BETWEEN @start_dt AND @end_dt
  AND d.seen_at >= @start_dt
