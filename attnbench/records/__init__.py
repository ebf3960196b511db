"""The record, results.jsonl and its loaders, resume and merge."""
