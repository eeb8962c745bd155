MODEL (
  name bakery.daily_sales,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column ds
  ),
  end '2024-01-03',
  grain (ds, item),
  audits (positive_quantity)
);

WITH sales AS (
  SELECT sold_at::DATE AS ds, item, quantity
  FROM raw.sales
  WHERE sold_at::DATE BETWEEN @start_ds AND @end_ds
)
SELECT
  ds,
  item,
  SUM(quantity)::INTEGER AS quantity,
  COUNT(*)::INTEGER AS sales
FROM sales
GROUP BY ds, item;

AUDIT (name positive_quantity);
SELECT * FROM @this_model WHERE quantity <= 0;
