-- why: a filter anchored on the start covers at most seven daily intervals per run
-- sources: {raw.snapshots: ds}
-- time_column: ds
-- interval: 1d
-- expect:
--   class: BoundedSafe
--   batch_limit: 7
--   reasons: [window_relative@12]
--   bounds: {raw.snapshots: [PT0S, P6D]}
SELECT ds, account_id, balance
FROM raw.snapshots
WHERE ds BETWEEN @start_ds AND @start_ds + 6
