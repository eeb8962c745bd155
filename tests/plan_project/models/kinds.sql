MODEL (name raw.kinds, kind VIEW);
SELECT * FROM (VALUES ('k0', TRUE), ('k1', FALSE), ('k2', TRUE)) AS t(k, active)
