"""Benchmarks: `python -m wadiloco.benchmarks [--json] [--quick]`."""
