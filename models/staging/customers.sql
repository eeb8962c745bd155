MODEL (
  name shop.customers,
  kind FULL,
  cron '@daily',
  grain customer_id,
  owner 'data-team@example.com',
  tags [customers, core],
  description 'Customer dimension: one row per customer, cleaned up from the signup form export',
  column_descriptions (
    customer_id = 'Customer id, handed out in signup order',
    customer_name = 'Full name, trimmed',
    country = 'ISO 3166 alpha-2 country code, upper case',
    signup_date = 'Day the customer signed up',
    segment = 'consumer or business'
  ),
  audits (
    not_null(columns := (customer_id, country, segment)),
    unique_values(columns := (customer_id)),
    accepted_values(column := segment, is_in := ('consumer', 'business'))
  )
);

-- The raw export has country codes typed by hand ('de', ' FR '): normalise them once, here.
SELECT
  customer_id,
  TRIM(name) AS customer_name,
  UPPER(TRIM(country)) AS country,
  signup_date,
  LOWER(TRIM(segment)) AS segment
FROM raw.customers
