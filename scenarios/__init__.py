"""The shipped scenarios, one YAML per regime (testbed/: the paper testbed's stages), installed with
the package so that the sweep files under experiments/, which name them by relative path, and the
benchmarks find them in a non-editable install too. No code."""
