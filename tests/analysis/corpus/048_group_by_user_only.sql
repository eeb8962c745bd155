-- why: first-seen per user over all history is the classic model that is wrong on a slice
-- sources: {raw.events: ts}
-- time_column: first_seen_date
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [aggregate@13, lookback_underivable@12]
--   bounds: {}
SELECT
  user_id,
  CAST(MIN(ts) AS DATE) AS first_seen_date
FROM raw.events
GROUP BY user_id
