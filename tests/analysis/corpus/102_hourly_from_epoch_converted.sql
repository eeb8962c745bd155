-- why: from_unixtime on the epoch macros keeps the offset in seconds
-- sources: {raw.pings: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.pings: [PT10M, PT0S]}
SELECT ts, host
FROM raw.pings
WHERE ts >= from_unixtime(@start_epoch - 600)
  AND ts <= from_unixtime(@end_epoch)
