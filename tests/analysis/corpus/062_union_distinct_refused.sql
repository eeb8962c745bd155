-- why: UNION without ALL deduplicates, like DISTINCT
-- sources: {raw.web_orders: ts, raw.app_orders: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [distinct@12]
--   bounds: {raw.web_orders: [PT0S, PT0S], raw.app_orders: [PT0S, PT0S]}
SELECT ts, order_id FROM raw.web_orders
WHERE ts BETWEEN @start_dt AND @end_dt
UNION
SELECT ts, order_id FROM raw.app_orders
WHERE ts BETWEEN @start_dt AND @end_dt
