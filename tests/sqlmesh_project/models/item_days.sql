MODEL (
  name bakery.item_days,
  kind FULL
);

-- Columns whose meaning in DuckDB their types decide, types only the tables say: days and quantities of
-- another model, prices of a seed, times of the external table.
WITH firsts AS (
  SELECT item, MIN(sold_at::DATE) AS first_day, MIN(sold_at) AS first_at
  FROM raw.sales
  GROUP BY item
)
SELECT
  d.ds,
  d.item,
  CAST(d.ds - DATE '2023-12-25' AS INTEGER) AS days_since,
  d.ds - f.first_day < 1 AS first_day,
  d.ds + INTERVAL 12 HOUR AS noon,
  f.first_day - INTERVAL 1 DAY AS eve,
  CAST(d.quantity * p.price AS INTEGER) AS rounded_revenue,
  f.first_at - INTERVAL 30 MINUTE AS before_first,
  d.item[1:3] AS item_prefix
FROM bakery.daily_sales AS d
JOIN bakery.prices AS p
  ON p.item = d.item
JOIN firsts AS f
  ON f.item = d.item
