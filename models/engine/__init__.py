"""The serving engine, SimPy-free: state and step rules, KV blocks, prefix cache, latency laws."""
