-- why: no WHERE on the time column, but the output time column derives from it; the clamp bounds it
-- sources: {raw.transactions: transaction_timestamp}
-- time_column: revenue_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.transactions: [PT0S, PT0S]}
SELECT
  CAST(transaction_timestamp AS DATE) AS revenue_date,
  user_id,
  COUNT(*) AS transaction_count,
  SUM(amount) AS total_revenue
FROM raw.transactions
WHERE transaction_timestamp IS NOT NULL
GROUP BY 1, 2
