"""Files -> models: the MODEL header, the query, kinds, audits, seeds, Python models, sources.yaml, settings, the project folder."""
