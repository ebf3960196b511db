"""Attention implementations, one module per kernel family; each imports its library lazily."""
