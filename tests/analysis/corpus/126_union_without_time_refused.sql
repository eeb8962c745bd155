-- why: UNION without ALL of columns without the time column dedupes across intervals
-- sources: {raw.web_orders: ts, raw.app_orders: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [distinct@13]
--   bounds: {raw.web_orders: [PT0S, PT0S], raw.app_orders: [PT0S, PT0S]}
WITH buyers AS (
  SELECT customer_id FROM raw.web_orders
  WHERE ts BETWEEN @start_dt AND @end_dt
  UNION
  SELECT customer_id FROM raw.app_orders
  WHERE ts BETWEEN @start_dt AND @end_dt
)
SELECT w.ts, w.customer_id
FROM raw.web_orders AS w
JOIN buyers AS b ON b.customer_id = w.customer_id
WHERE w.ts BETWEEN @start_dt AND @end_dt
