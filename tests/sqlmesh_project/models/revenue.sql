MODEL (
  name bakery.revenue,
  kind FULL
);

JINJA_QUERY_BEGIN;
SELECT
  s.item,
  ROUND(SUM(s.quantity * p.price), 2) AS revenue
FROM bakery.daily_sales AS s
JOIN bakery.prices AS p
  ON p.item = s.item
WHERE s.quantity >= {{ var('min_quantity') }}
GROUP BY s.item
JINJA_END;
