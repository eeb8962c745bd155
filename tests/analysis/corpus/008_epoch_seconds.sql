-- why: numbers added to @start_epoch are seconds
-- sources: {raw.pings: event_epoch}
-- time_column: event_epoch
-- interval: 1h
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.pings: [PT1H, PT0S]}
SELECT event_epoch, host, latency_ms
FROM raw.pings
WHERE event_epoch >= @start_epoch - 3600
  AND event_epoch <= @end_epoch
