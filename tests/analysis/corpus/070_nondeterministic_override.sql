-- why: allow_nondeterministic admits a load timestamp and keeps full batching
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- overrides: [allow_nondeterministic]
-- expect:
--   class: FullyBatchSafe
--   reasons: [nondeterministic@10]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT ts, device_id, current_timestamp() AS loaded_at
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
