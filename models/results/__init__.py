"""What a run produces: the per-request table, the summary and the invariants."""
