-- why: a month offset is taken at its longest (31 days) so nothing is cut
-- sources: {raw.invoices: invoice_date}
-- time_column: invoice_date
-- interval: 1d
-- expect:
--   class: FullyBatchSafe
--   bounds: {raw.invoices: [P31D, PT0S]}
SELECT invoice_date, customer_id, total
FROM raw.invoices
WHERE invoice_date >= add_months(@start_date, -1)
  AND invoice_date <= @end_date
