-- why: an empty OVER () aggregates over every row a run reads
-- sources: {raw.sales: sold_at}
-- time_column: sold_at
-- interval: 1d
-- expect:
--   class: Refused
--   reasons: [window_function@11]
--   bounds: {raw.sales: [PT0S, PT0S]}
SELECT
  sold_at,
  amount / SUM(amount) OVER () AS share_of_total
FROM raw.sales
WHERE sold_at BETWEEN @start_dt AND @end_dt
