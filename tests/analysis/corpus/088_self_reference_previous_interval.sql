-- why: a model that reads its own previous day runs one interval at a time, in order
-- model: shop.balances
-- sources: {shop.balances: balance_date, raw.transactions: booked_on}
-- time_column: balance_date
-- interval: 1d
-- expect:
--   class: PerPartitionOnly
--   batch_limit: 1
--   reasons: [self_reference@21, window_relative@22]
--   bounds: {raw.transactions: [PT0S, PT0S], shop.balances: [P1D, PT0S]}
WITH movements AS (
  SELECT booked_on AS balance_date, account_id, SUM(amount) AS amount
  FROM raw.transactions
  WHERE booked_on BETWEEN @start_ds AND @end_ds
  GROUP BY booked_on, account_id
)
SELECT m.balance_date, m.account_id, COALESCE(p.balance, 0) + m.amount AS balance
FROM movements AS m
LEFT JOIN (
  SELECT account_id, balance
  FROM shop.balances
  WHERE balance_date >= @start_ds - INTERVAL 1 DAY AND balance_date < @start_ds
) AS p
  ON p.account_id = m.account_id
