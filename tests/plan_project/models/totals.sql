MODEL (name s.totals, kind FULL);
SELECT SUM(n) AS n FROM s.daily
