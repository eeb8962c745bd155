MODEL (
  name shop.recent,
  kind INCREMENTAL_BY_TIME_RANGE (time_column ds),
  start '5 years ago',
  end '2024-01-04',
  cron '@daily',
  dialect duckdb
);

SELECT
  ds,
  COUNT(*) AS orders
FROM shop.orders
WHERE ds BETWEEN @start_ds AND @end_ds
GROUP BY ds
