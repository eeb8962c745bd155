-- why: a filter under OR does not bound the source, and nothing else does
-- sources: {raw.orders: order_ts, raw.refunds: refunded_at}
-- time_column: order_ts
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [lookback_underivable@11]
--   bounds: {raw.orders: [PT0S, PT0S]}
SELECT o.order_ts, o.order_id, r.amount
FROM raw.orders AS o
LEFT JOIN raw.refunds AS r
  ON r.order_id = o.order_id
  AND (r.refunded_at BETWEEN @start_dt AND @end_dt OR r.manual)
WHERE o.order_ts BETWEEN @start_dt AND @end_dt
