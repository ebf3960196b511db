"""The small values everything shares: the case, the axis facts, workloads and their counts, quantized formats, units, errors."""
