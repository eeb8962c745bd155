-- why: UNION without ALL whose branches all keep the time column dedupes within one interval
-- sources: {raw.web_orders: ts, raw.app_orders: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.web_orders: [PT0S, PT0S], raw.app_orders: [PT0S, PT0S]}
SELECT ts, order_id FROM raw.web_orders
WHERE ts BETWEEN @start_dt AND @end_dt
UNION
SELECT ts, order_id FROM raw.app_orders
WHERE ts BETWEEN @start_dt AND @end_dt
