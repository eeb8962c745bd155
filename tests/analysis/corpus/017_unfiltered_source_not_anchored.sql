-- why: the output time column is another column of the table, and nothing filters the time column
-- sources: {raw.orders: order_ts}
-- time_column: order_date
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [lookback_underivable@10]
--   bounds: {}
SELECT order_date, order_id, status
FROM raw.orders
WHERE status <> 'cancelled'
