"""Seeded inputs, the float64 reference, the correctness rule, the FP8 emulation, repeatability."""
