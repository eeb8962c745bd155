-- why: a table the caller does not know is refused rather than guessed
-- sources: {raw.events: ts}
-- time_column: ts
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [unknown_source@12]
--   bounds: {raw.events: [PT0S, PT0S]}
SELECT e.ts, x.label
FROM raw.events AS e
JOIN
  raw.labels AS x
  ON x.id = e.id
WHERE e.ts BETWEEN @start_dt AND @end_dt
