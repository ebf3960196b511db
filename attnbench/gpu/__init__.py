"""The GPU's state read, judged and sampled per measurement (docs/gpu.md); nothing here prints or advises."""
