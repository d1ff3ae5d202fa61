"""Training: progress, the interference of merge work, the host's cores."""
