"""Benchmarks: figures measured side by side in one run (DESIGN.md §5); never pass/fail."""
