"""attnbench: a benchmark and report generator for attention on long sequences."""

from __future__ import annotations

__version__ = "0.1.0"
