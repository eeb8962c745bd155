-- why: the model's weeks start on Sunday (its time column); a window over ISO (Monday) weeks cuts across them
-- sources: {shop.order_lines: order_date}
-- time_column: week_start
-- interval: 7d
-- expect:
--   class: Refused
--   reasons: [window_function@12]
--   bounds: {shop.order_lines: [PT0S, PT0S]}
SELECT
  DATE_SUB(order_date, DAYOFWEEK(order_date) - 1) AS week_start,
  order_id,
  SUM(revenue) OVER (PARTITION BY DATE_TRUNC('week', order_date)) AS iso_week_revenue
FROM shop.order_lines
WHERE order_date BETWEEN @start_ds AND @end_ds
