AUDIT (name not_null_items);
SELECT * FROM @this_model WHERE item IS NULL;
