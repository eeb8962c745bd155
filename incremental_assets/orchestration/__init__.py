"""Dagster: translator, assets, checks, schedules, sensors, the instance and its queries, run tags, status, the CLI's
runner, the component, definitions."""
