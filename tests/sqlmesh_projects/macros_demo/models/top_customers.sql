MODEL (
  name shop.top_customers,
  kind FULL,
  dialect duckdb
);

@DEF(with_regions, TRUE);
@DEF(top_n, 2);

@WITH(@top_n > 0) spend AS (
  SELECT customer, SUM(COALESCE(amount, 0)) AS total FROM shop.orders GROUP BY customer
), regions AS (
  SELECT * FROM (VALUES ('ann', 'north'), ('bob', 'south')) AS r(customer, region)
)
SELECT
  s.customer,
  s.total,
  @IF(@with_regions, r.region, NULL) AS region
FROM spend AS s
LEFT OUTER @JOIN(@with_regions) regions AS r ON s.customer = r.customer
@JOIN(@top_n < 0) shop.orders AS o ON o.customer = s.customer
ORDER BY s.total DESC
@LIMIT(@top_n > 0) @top_n
