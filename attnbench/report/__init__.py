"""Reports from stored results: HTML page, PNG charts, Markdown summary, and run-to-run comparison."""

from __future__ import annotations

from attnbench.report.compare import Comparison, compare_runs, comparison_table
from attnbench.report.render import render_report

__all__ = ["Comparison", "compare_runs", "comparison_table", "render_report"]
