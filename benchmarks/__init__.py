"""Benchmarks: `python -m benchmarks [--json] [--quick]`."""
