MODEL (
  name bakery.item_totals
);

SELECT item, SUM(quantity)::INTEGER AS quantity
FROM bakery.daily_sales
GROUP BY item
