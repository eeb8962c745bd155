-- why: a FULL JOIN ON condition filters neither side, so the relation bounds nothing
-- sources: {raw.plan: planned_at, raw.actual: happened_at}
-- time_column: planned_at
-- interval: 1h
-- expect:
--   class: Refused
--   reasons: [lookback_underivable@11]
--   bounds: {raw.plan: [PT0S, PT0S]}
SELECT p.planned_at, p.task_id, a.happened_at
FROM raw.plan AS p
FULL OUTER JOIN raw.actual AS a
  ON a.task_id = p.task_id
  AND a.happened_at BETWEEN p.planned_at AND p.planned_at + INTERVAL 1 HOUR
WHERE p.planned_at BETWEEN @start_dt AND @end_dt
