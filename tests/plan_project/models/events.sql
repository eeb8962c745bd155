MODEL (name raw.events, kind VIEW);
SELECT * FROM (VALUES ('k0', 1, 'a'), ('k1', 2, 'b'), ('k0', -3, 'a'), ('k2', 4, 'c')) AS t(k, v, g)
