MODEL (
  name shop.by_customer,
  kind FULL,
  dialect duckdb
);

@DEF(min_orders, 1);

SELECT
  customer,
  @PIVOT(status, ['open', 'done'], prefix := 'n_', quote := FALSE)
FROM shop.orders
@WHERE(@min_orders > 0) status <> 'void'
GROUP BY customer
@HAVING(@min_orders > 0) COUNT(*) > @min_orders
