MODEL (
  name shop.category_summary,
  kind VIEW,
  owner 'merchandising@example.com',
  tags [sales, merchandising],
  description 'All-time totals per item category, always current (a view over the order lines)',
  column_descriptions (
    category = 'Item category',
    order_lines = 'Order lines in the category',
    units = 'Units sold',
    revenue = 'Revenue, returns included',
    revenue_per_unit = 'Average revenue per unit sold',
    return_rate = 'Share of revenue from orders that were returned',
    first_order_date = 'First day with a sale in the category',
    last_order_date = 'Latest day with a sale in the category'
  )
);

SELECT
  category,
  COUNT(order_id) AS order_lines,
  SUM(quantity) AS units,
  CAST(SUM(revenue) AS DECIMAL(18, 2)) AS revenue,
  CAST(SUM(revenue) / NULLIF(SUM(quantity), 0) AS DECIMAL(18, 2)) AS revenue_per_unit,
  CAST(
    SUM(CASE WHEN status = 'returned' THEN revenue ELSE 0 END) / NULLIF(SUM(revenue), 0) AS DECIMAL(9, 4)
  ) AS return_rate,
  MIN(order_date) AS first_order_date,
  MAX(order_date) AS last_order_date
FROM shop.order_lines
GROUP BY
  category
