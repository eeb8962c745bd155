-- why: a scalar subquery over a time series sees only the run's window
-- sources: {raw.sales: sold_at}
-- time_column: sold_at
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [subquery@11]
--   bounds: {raw.sales: [PT0S, PT0S]}
SELECT sold_at, amount
FROM raw.sales
WHERE amount > (SELECT AVG(amount) FROM raw.sales WHERE sold_at BETWEEN @start_dt AND @end_dt)
  AND sold_at BETWEEN @start_dt AND @end_dt
