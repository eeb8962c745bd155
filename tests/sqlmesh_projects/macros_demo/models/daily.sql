MODEL (
  name shop.daily,
  kind INCREMENTAL_BY_TIME_RANGE (time_column ds),
  start '2024-01-01',
  cron '@daily',
  dialect duckdb
);

SELECT
  ds,
  COUNT(*) AS orders,
  SUM(COALESCE(amount, 0)) AS revenue
FROM shop.orders
WHERE @in_window(ds)
GROUP BY ds
