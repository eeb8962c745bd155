-- why: a window computed only from a table read in full gives the same answer on every run
-- sources: {raw.orders: order_ts, dim.prices: null}
-- time_column: order_ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.orders: [PT0S, PT0S], dim.prices: null}
WITH latest_price AS (
  SELECT item_id, price
  FROM (
    SELECT item_id, price, ROW_NUMBER() OVER (PARTITION BY item_id ORDER BY valid_from DESC) AS rn
    FROM dim.prices
  ) AS p
  WHERE rn = 1
)
SELECT o.order_ts, o.item_id, o.quantity * lp.price AS amount
FROM raw.orders AS o
JOIN latest_price AS lp
  ON lp.item_id = o.item_id
WHERE o.order_ts BETWEEN @start_dt AND @end_dt
