MODEL (name s.daily, kind FULL, description 'per key');
SELECT e.k AS k, COUNT(*) AS n, SUM(e.v) AS total FROM raw.events AS e JOIN raw.kinds AS d ON e.k = d.k WHERE e.v >= 0 GROUP BY e.k
