-- why: two time series joined on a key, each filtered on the window (the demo's order lines)
-- sources: {raw.orders: order_ts, raw.order_items: order_ts, raw.items: null}
-- time_column: order_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.orders: [PT0S, PT0S], raw.order_items: [PT0S, PT0S], raw.items: null}
SELECT o.order_id, li.line_no, o.order_date, li.item_id, it.category, li.quantity * it.unit_price AS revenue
FROM raw.orders AS o
JOIN raw.order_items AS li
  ON li.order_id = o.order_id AND li.order_date = o.order_date
JOIN raw.items AS it
  ON it.item_id = li.item_id
WHERE o.order_ts BETWEEN @start_dt AND @end_dt
  AND li.order_ts BETWEEN @start_dt AND @end_dt
  AND o.status <> 'cancelled'
