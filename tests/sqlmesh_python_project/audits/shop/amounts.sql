AUDIT (
  name assert_amounts_not_negative,
);
SELECT * FROM shop.orders
WHERE order_ds BETWEEN @start_ds AND @end_ds AND amount < 0;
