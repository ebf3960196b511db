"""Timers, when to stop sampling, peak memory and energy."""
