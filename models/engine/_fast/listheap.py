"""The pure-Python core's finish heap: a list and the standard library's heapq, under KeyHeap's names.

models/engine/heap.py's KeyHeap sifts keys in an array so the compiled core compares C integers; run
uncompiled, those sifts are Python loops, about a fifth of a pure run's time. CPython's heapq does the
same sifts in C on a list, so the pure core takes this class in place of KeyHeap (`core`, this
package's loader). Same algorithm, so after every call both hold the same keys in the same places
(tests/engine/test_serving_core.py): the results are the same bit for bit.
"""

from __future__ import annotations

import heapq

MASK = 0xFFFFFFFF  # a key's request id (models.engine.serving `key`)


class ListHeap:
    __slots__ = ("a",)

    def __init__(self) -> None:
        self.a: list[int] = []

    @property
    def n(self) -> int:
        return len(self.a)

    def __len__(self) -> int:
        return len(self.a)

    def __iter__(self):
        return iter(self.a)

    def push(self, x: int) -> None:
        heapq.heappush(self.a, x)

    def pop(self) -> int:
        """The least key, removed (IndexError if empty)."""
        return heapq.heappop(self.a)

    def top(self) -> int:
        if not self.a:
            raise IndexError("top of an empty heap")
        return self.a[0]

    def pop_due(self, t: int) -> int:
        """The least key, removed, if it is due by iteration t (key >> 32 <= t); else -1, nothing removed."""
        a = self.a
        if a and a[0] >> 32 <= t:
            return heapq.heappop(a)
        return -1

    def load(self, keys) -> None:
        """Hold exactly `keys`, in this order (a heap already: models.engine.tape copies one)."""
        self.a[:] = keys

    def push_raw(self, x: int) -> None:
        """Append without sifting."""
        self.a.append(x)

    def take(self, rid: int) -> int:
        """Remove request rid's key and return it: the last key takes its place, then heapify."""
        a = self.a
        j = next((j for j, x in enumerate(a) if x & MASK == rid), None)
        if j is None:
            raise ValueError(f"request {rid} is not decoding")
        x = a[j]
        a[j] = a[-1]
        a.pop()
        heapq.heapify(a)
        return x
