-- why: the default frame runs from the first row of the partition, i.e. all history
-- sources: {raw.payments: paid_at}
-- time_column: paid_at
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [window_function@12]
--   bounds: {raw.payments: [PT0S, PT0S]}
SELECT
  paid_at,
  customer_id,
  SUM(amount) OVER (ORDER BY paid_at) AS running_total
FROM raw.payments
WHERE paid_at BETWEEN @start_dt AND @end_dt
