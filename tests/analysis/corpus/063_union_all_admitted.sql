-- why: UNION ALL of two sources, each filtered on its own time column
-- sources: {raw.web_orders: ts, raw.store_orders: sold_on}
-- time_column: ts
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.web_orders: [PT0S, PT0S], raw.store_orders: [PT0S, PT0S]}
SELECT ts, order_id, 'web' AS channel FROM raw.web_orders
WHERE ts BETWEEN @start_dt AND @end_dt
UNION ALL
SELECT CAST(sold_on AS TIMESTAMP), receipt_id, 'store' FROM raw.store_orders
WHERE sold_on BETWEEN @start_ds AND @end_ds
