"""What a run produces: the per-request table, the summary and the invariants (metrics, invariants),
built for a run in one place (run: the builder, and the protocol through which its extras add to it)."""
