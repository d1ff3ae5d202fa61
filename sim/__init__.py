"""SimPy wiring: shared resources, serving engines, learners and the fleet that joins them."""
