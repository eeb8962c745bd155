-- why: a weekly model whose weeks start on Sunday; the same week expression groups and partitions
-- sources: {shop.order_lines: order_date}
-- time_column: week_start
-- interval: 7d
-- expect:
--   class: FullyBatchSafe
--   bounds: {shop.order_lines: [PT0S, PT0S]}
SELECT
  DATE_SUB(order_date, DAYOFWEEK(order_date) - 1) AS week_start,
  category,
  SUM(revenue) AS revenue,
  RANK() OVER (PARTITION BY DATE_SUB(order_date, DAYOFWEEK(order_date) - 1) ORDER BY SUM(revenue) DESC) AS category_rank
FROM shop.order_lines
WHERE order_date BETWEEN @start_ds AND @end_ds
GROUP BY DATE_SUB(order_date, DAYOFWEEK(order_date) - 1), category
