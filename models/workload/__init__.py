"""Workloads: arrival processes and token lengths, traces, closed-loop clients."""
