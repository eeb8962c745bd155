-- why: quoted table and column names resolve to the same sources
-- sources: {shop.order_lines: order_date, shop.customers: null}
-- time_column: order_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {shop.order_lines: [PT0S, PT0S], shop.customers: null}
SELECT `ol`.`order_date`, `c`.`country`, SUM(`ol`.`revenue`) AS `revenue`
FROM `shop`.`order_lines` AS `ol`
JOIN `shop`.`customers` AS `c`
  ON `c`.`customer_id` = `ol`.`customer_id`
WHERE `ol`.`order_date` BETWEEN @start_ds AND @end_ds
GROUP BY `ol`.`order_date`, `c`.`country`
