-- why: a time series joined on a key only, with nothing on its time column, is read back to the beginning
-- sources: {raw.orders: order_ts, raw.payments: paid_at}
-- time_column: order_ts
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [lookback_underivable@11]
--   bounds: {raw.orders: [PT0S, PT0S]}
SELECT o.order_ts, o.order_id, p.method
FROM raw.orders AS o
JOIN raw.payments AS p
  ON p.order_id = o.order_id
WHERE o.order_ts BETWEEN @start_dt AND @end_dt
