"""Pure: (project, model, window) -> RunPlan. The one place that decides rebuilds, batching (run size) and schema-change
policy; audit SQL (a run's macros are rendered by load/macros/render.py)."""
