"""Files -> models: the MODEL header, the query, its macros (load/macros/), kinds, audits, seeds, Python models,
sources.yaml, settings, the project folder."""
