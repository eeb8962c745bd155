-- why: reporting a day's events under the next day needs the day before the window
-- sources: {raw.events: ts}
-- time_column: report_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [P1D, PT0S]}
SELECT DATE_ADD(CAST(ts AS DATE), 1) AS report_date, device_id, reading
FROM raw.events
