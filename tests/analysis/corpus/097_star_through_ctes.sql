-- why: SELECT * passes the time column through CTEs, so the output still derives from it
-- sources: {raw.events: ts, dim.devices: null}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.events: [PT0S, PT0S], dim.devices: null}
WITH e AS (
  SELECT * FROM raw.events
), enriched AS (
  SELECT e.*, d.site FROM e JOIN dim.devices AS d ON d.device_id = e.device_id
)
SELECT * FROM enriched
