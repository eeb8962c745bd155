-- why: equal day keys tie the second table to the first one's window
-- sources: {shop.daily_sales: sale_date, shop.daily_costs: cost_date}
-- time_column: sale_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {shop.daily_sales: [PT0S, PT0S], shop.daily_costs: [PT0S, PT0S]}
SELECT s.sale_date, s.store_id, s.revenue - c.cost AS margin
FROM shop.daily_sales AS s
JOIN shop.daily_costs AS c
  ON c.store_id = s.store_id AND c.cost_date = s.sale_date
WHERE s.sale_date BETWEEN @start_ds AND @end_ds
