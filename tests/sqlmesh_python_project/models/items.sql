MODEL (
  name shop.items,
  kind SEED (
    path '../seeds/items.csv'
  ),
  audits (
    price_above(threshold := @lowest_price()),
    named_items,
  )
);

AUDIT (
  name price_above,
);
SELECT * FROM @this_model WHERE price <= @threshold;

AUDIT (
  name named_items,
);
SELECT * FROM @this_model WHERE LENGTH(item) < 1;
