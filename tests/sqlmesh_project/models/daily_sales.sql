MODEL (
  name bakery.daily_sales,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column ds
  ),
  end '2024-01-03',
  grain (ds, item),
  audits (positive_quantity)
);

SELECT
  sold_at::DATE AS ds,
  item,
  SUM(quantity)::INTEGER AS quantity,
  COUNT(*)::INTEGER AS sales
FROM raw.sales
WHERE sold_at::DATE BETWEEN @start_ds AND @end_ds
GROUP BY sold_at::DATE, item;

AUDIT (name positive_quantity);
SELECT * FROM @this_model WHERE quantity <= 0;
