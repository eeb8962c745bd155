-- why: dialect transpilation -- a BigQuery QUALIFY over a window partitioned by DATE(ts)
-- dialect: bigquery
-- sources: {raw.scores: ts}
-- time_column: score_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.scores: [PT0S, PT0S]}
SELECT DATE(ts) AS score_date, player, score
FROM raw.scores
WHERE ts BETWEEN @start_dt AND @end_dt
QUALIFY ROW_NUMBER() OVER (PARTITION BY DATE(ts) ORDER BY score DESC) <= 10
