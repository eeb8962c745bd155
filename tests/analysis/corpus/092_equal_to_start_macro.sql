-- why: ds = @start_ds covers only the first interval of a run, so runs are one interval each
-- sources: {raw.snapshots: ds}
-- time_column: ds
-- interval: 1d
-- expect:
--   class: PerPartitionOnly
--   batch_limit: 1
--   reasons: [window_relative@12]
--   bounds: {raw.snapshots: [PT0S, PT0S]}
SELECT ds, account_id, balance
FROM raw.snapshots
WHERE ds = @start_ds
