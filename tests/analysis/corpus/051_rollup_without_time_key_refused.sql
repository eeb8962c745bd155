-- why: ROLLUP(day, country) also produces a grand total over all days
-- sources: {raw.orders: order_ts}
-- time_column: order_date
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [aggregate@13]
--   bounds: {raw.orders: [PT0S, PT0S]}
SELECT CAST(order_ts AS DATE) AS order_date, country, COUNT(*) AS orders
FROM raw.orders
WHERE order_ts BETWEEN @start_dt AND @end_dt
GROUP BY
  ROLLUP(CAST(order_ts AS DATE), country)
