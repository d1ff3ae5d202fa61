"""Fixed prompt sets: a few prompts of known token lengths, cycled by the global request index.

A closed loop's `prompts: NAME` (models.workload.kinds) sends, as request i, the prompt of slot
i mod (number of slots) of the set NAME; a per-slot `output_tokens` list cycles the same way. Sets
are registered by name (`register`); the testbed plug-in registers its three (short, mixed, long:
models/testbed/prompts.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wadiloco.models.plugins import Registry


@dataclass(frozen=True)
class PromptSet:
    """One prompt set: tokens per slot, where they come from, and the exact characters if known."""

    name: str
    tokens: tuple[int, ...]
    source: str
    chars: tuple[int, ...] | None = None

    @property
    def n_slots(self) -> int:
        return len(self.tokens)

    def batch(self, index: int, size: int) -> np.ndarray:
        """Prompt tokens of the `size` requests that start at global request `index`."""
        return np.asarray(self.tokens, dtype=np.int64)[slots(index, size, self.n_slots)]


PROMPT_SETS: Registry[str, PromptSet] = Registry("prompt set")


def register(ps: PromptSet) -> PromptSet:
    if not ps.tokens or any(t < 1 for t in ps.tokens):
        raise ValueError(f"prompt set {ps.name!r}: every slot needs >= 1 token")
    PROMPT_SETS[ps.name] = ps
    return ps


def slots(index: int, size: int, n: int) -> np.ndarray:
    """Slots of the requests index .. index + size - 1 among n (the global index advances by the batch size)."""
    if size < 0 or index < 0:
        raise ValueError(f"index ({index}) and size ({size}) must be >= 0")
    return (index + np.arange(size, dtype=np.int64)) % n


def output_batch(max_new_tokens: int | Sequence[int], index: int, size: int) -> np.ndarray:
    """Output tokens of the `size` requests from global index `index` on: every request reaches
    `max_new_tokens`, or with a per-slot list, request i gets entry i mod its length."""
    if isinstance(max_new_tokens, int):
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        return np.full(size, max_new_tokens, dtype=np.int64)
    per_slot = np.asarray(max_new_tokens, dtype=np.int64)
    if per_slot.ndim != 1 or len(per_slot) == 0 or (per_slot < 1).any():
        raise ValueError(f"a per-slot output list needs values >= 1, got {list(max_new_tokens)}")
    return per_slot[slots(index, size, len(per_slot))]
