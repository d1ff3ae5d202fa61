"""Per-subsystem RNG streams.

Every subsystem (arrivals of sidecar 3, token lengths, learner jitter, a matched-random draw)
draws from its own stream, derived from (seed, subsystem name). Adding a draw in one subsystem
never shifts another's numbers, which is what makes common random numbers across policies hold.
"""

from __future__ import annotations

import zlib

import numpy as np


def _key(name: str) -> int:
    return zlib.crc32(name.encode("utf-8"))


def stream(seed: int, *names: str | int) -> np.random.Generator:
    """A Generator for (seed, *names); same inputs give the same stream in any process."""
    entropy = [int(seed)] + [_key(str(n)) for n in names]
    return np.random.default_rng(np.random.SeedSequence(entropy))
