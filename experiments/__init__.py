"""Running scenarios and sweeps, the calibration protocol, statistics, figures and the CLI."""
