"""The small values everything shares: the case, axis facts, workloads and their counts, quantized formats,
units, errors."""
