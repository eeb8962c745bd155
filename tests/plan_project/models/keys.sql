MODEL (name s.keys, kind FULL);
SELECT k FROM s.daily
