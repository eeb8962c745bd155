-- why: exploding an array column is row by row
-- sources: {raw.baskets: created_at}
-- time_column: created_at
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.baskets: [PT0S, PT0S]}
SELECT created_at, basket_id, item
FROM raw.baskets
LATERAL VIEW explode(items) exploded AS item
WHERE created_at BETWEEN @start_dt AND @end_dt
