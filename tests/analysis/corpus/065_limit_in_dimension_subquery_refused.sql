-- why: LIMIT is refused wherever it is, even over a table read in full
-- sources: {raw.events: ts, dim.devices: null}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [limit@11]
--   bounds: {raw.events: [PT0S, PT0S], dim.devices: null}
SELECT e.ts, e.device_id
FROM raw.events AS e
JOIN (SELECT device_id FROM dim.devices ORDER BY installed_at LIMIT 10) AS first_devices
  ON first_devices.device_id = e.device_id
WHERE e.ts BETWEEN @start_dt AND @end_dt
