"""Plain, SimPy-free domain logic: latency, workloads, traces, training, policies."""
