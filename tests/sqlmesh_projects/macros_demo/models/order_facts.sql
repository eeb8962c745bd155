MODEL (
  name shop.order_facts,
  kind FULL,
  dialect duckdb
);

@DEF(cols, [amount, discount]);
@DEF(min_id, 1);
@DEF(net, (a, d) -> a - COALESCE(d, 0));
@DEF(statuses, ['open', 'done', 'void']);

SELECT
  id,
  @EACH(@cols, c -> COALESCE(c, 0) * 2 AS @{c}_doubled),
  @net(amount, discount) AS net,
  @SAFE_ADD(amount, discount) AS gross,
  @SAFE_DIV(amount, discount) AS ratio,
  @GENERATE_SURROGATE_KEY(id, customer) AS order_key,
  ROUND(@HAVERSINE_DISTANCE(lat, lon, 52.52, 13.40, 'km'), 3) AS km_from_berlin,
  @IF(@min_id > 0, 'positive', 'other') AS sign,
  @EVAL(@min_id + 41) AS answer,
  @plus_one(41) AS plus_one,
  @scaled(id, 10) AS id_times_ten,
  @Loud(customer) AS loud_customer,
  @flags(status, [open, done]),
  @as_text(amount + 1) AS amount_sql,
  @SQL('id * 3') AS tripled,
  @REDUCE([id, 100, 1000], (x, y) -> x + y) AS reduced,
  @EACH(@FILTER(@statuses, s -> s <> 'void'), s -> CAST(status = s AS INT) AS status_@s)
FROM shop.orders
WHERE @AND(id >= @min_id, NULL) AND @OR(status = 'done', status = 'open', status = 'void')
