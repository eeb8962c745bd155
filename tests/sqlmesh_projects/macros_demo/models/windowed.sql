MODEL (
  name shop.windowed,
  kind INCREMENTAL_BY_TIME_RANGE (time_column ds, batch_size 1),
  start '2024-01-01',
  end '2024-01-04',
  cron '@daily',
  dialect duckdb
);

SELECT
  ds,
  id,
  @IF(@start_ds >= '2024-01-03', CAST(COALESCE(amount, 0) * 2 AS DOUBLE), CAST(COALESCE(amount, 0) AS DOUBLE)) AS amount,
  @IF(@end_ds < '2024-01-02', 'first day', 'later') AS phase,
  @EVAL((@start_epoch - 1704067200) / 86400) AS day_index
FROM shop.orders
WHERE ds BETWEEN @start_ds AND @end_ds
@ORDER_BY(@start_ds = '2024-01-02') id
