"""Workloads: arrival processes and token lengths, traces, closed-loop clients.

Kinds in modules of their own (loadgen) are imported here, so that importing any module of the package
registers them (they import kinds' helpers: the registry lives there)."""

from wadiloco.models.workload import loadgen  # noqa: F401  (imported to register)
