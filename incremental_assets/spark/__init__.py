"""The only pyspark user: the session, a plan's inputs, one write strategy per kind of write, the executor, audits on
staged rows, model unit tests."""
