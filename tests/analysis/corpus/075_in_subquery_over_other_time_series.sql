-- why: an IN subquery over another time series is refused, naming that source
-- sources: {raw.orders: order_ts, raw.refunds: refunded_at}
-- time_column: order_ts
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [subquery@11]
--   bounds: {raw.orders: [PT0S, PT0S], raw.refunds: [PT0S, PT0S]}
SELECT order_ts, order_id
FROM raw.orders
WHERE order_id NOT IN (SELECT order_id FROM raw.refunds WHERE refunded_at BETWEEN @start_dt AND @end_dt)
  AND order_ts BETWEEN @start_dt AND @end_dt
