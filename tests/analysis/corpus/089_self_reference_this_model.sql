-- why: the this_model macro is a self-reference too
-- model: shop.latest_status
-- sources: {raw.status_changes: changed_at}
-- time_column: changed_at
-- interval: 1d
-- expect:
--   class: PerPartitionOnly
--   batch_limit: 1
--   reasons: [self_reference@16]
--   bounds: {raw.status_changes: [PT0S, PT0S], shop.latest_status: [P1D, PT0S]}
SELECT changed_at, order_id, status
FROM raw.status_changes
WHERE changed_at BETWEEN @start_dt AND @end_dt
UNION ALL
SELECT changed_at, order_id, status
FROM @this_model
WHERE changed_at BETWEEN @start_dt - INTERVAL 1 DAY AND @end_dt
