"""The record, results.jsonl and its loaders, whole-file writes, resume and merge."""
