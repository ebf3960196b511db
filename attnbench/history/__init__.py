"""The history of runs: a local SQLite store (store), trends over its dated runs (trend) and their charts (plot)."""
