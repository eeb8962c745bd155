"""What a model IS: pure frozen values (kinds, models, interval units and windows, audits, settings, the project).
Imports nothing of ours but errors."""
