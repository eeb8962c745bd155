MODEL (
  name bakery.prices,
  kind SEED (
    path '$root/seeds/prices.csv',
    batch_size 100
  ),
  columns (item TEXT, price DOUBLE)
)
