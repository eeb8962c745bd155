"""Pure: (project, model, window) -> RunPlan. The one place that decides rebuilds, batching (run size) and schema-change policy; macros; audit SQL."""
