-- why: catalog.schema.table names and upper-case spellings resolve case-insensitively
-- sources: {raw.events: ts, spark_catalog.dim.devices: null}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT0S, PT0S], spark_catalog.dim.devices: null}
SELECT e.ts, e.device_id, d.site
FROM RAW.EVENTS AS e
JOIN spark_catalog.dim.devices AS d
  ON d.device_id = e.device_id
WHERE e.TS BETWEEN @start_dt AND @end_dt
