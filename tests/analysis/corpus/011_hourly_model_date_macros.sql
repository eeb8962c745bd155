-- why: an hourly model filtering with date macros reads whole days around each run
-- sources: {raw.daily_rates: rate_date, raw.orders: order_ts}
-- time_column: order_hour
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.orders: [PT0S, PT0S], raw.daily_rates: [P1D, P1D]}
SELECT DATE_TRUNC('HOUR', o.order_ts) AS order_hour, o.order_id, o.amount * r.rate AS amount_eur
FROM raw.orders AS o
JOIN raw.daily_rates AS r
  ON r.currency = o.currency
WHERE o.order_ts BETWEEN @start_dt AND @end_dt
  AND r.rate_date BETWEEN @start_ds AND @end_ds
