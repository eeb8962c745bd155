MODEL (
  name shop.orders,
  kind FULL,
  dialect duckdb
);

SELECT
  id,
  customer,
  status,
  CAST(ds AS DATE) AS ds,
  amount,
  discount,
  lat,
  lon
FROM (VALUES
  (1, 'ann', 'open', '2024-01-01', 10.5, NULL, 52.52, 13.40),
  (2, 'bob', 'done', '2024-01-01', 20.0, 2.0, 48.85, 2.35),
  (3, 'ann', 'done', '2024-01-02', NULL, 1.0, 40.71, -74.00),
  (4, 'cyd', 'void', '2024-01-02', 7.25, NULL, 51.50, -0.12),
  (5, 'bob', 'open', '2024-01-03', 3.0, 0.0, 35.68, 139.69),
  (6, 'ann', 'done', '2024-01-04', 99.0, 9.0, 52.52, 13.40)
) AS t(id, customer, status, ds, amount, discount, lat, lon)
