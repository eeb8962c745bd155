-- why: a centred frame needs a day on both sides
-- sources: {raw.prices: price_date}
-- time_column: price_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.prices: [P1D, P1D]}
SELECT
  price_date,
  ticker,
  AVG(close) OVER (
    PARTITION BY ticker
    ORDER BY price_date
    RANGE BETWEEN INTERVAL 1 DAY PRECEDING AND INTERVAL 1 DAY FOLLOWING
  ) AS smoothed_close
FROM raw.prices
