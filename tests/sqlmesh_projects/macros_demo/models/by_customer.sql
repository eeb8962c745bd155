MODEL (
  name shop.by_customer,
  kind FULL,
  dialect duckdb
);

SELECT
  customer,
  @PIVOT(status, ['open', 'done'], prefix := 'n_', quote := FALSE)
FROM shop.orders
GROUP BY customer
