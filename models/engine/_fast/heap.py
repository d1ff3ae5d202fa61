# cython: boundscheck=False, wraparound=False
"""The decoders' finish heap: a min-heap of integer keys (models.engine.serving `key`: due << 32 | rid).

Two classes with one interface and one algorithm, CPython's heapq (Lib/heapq.py: `_siftdown`,
`_siftup`), so after every call both hold the same keys in the same places and pop them in the
same order (tests/engine/test_serving_core.py):

* `ListHeap`, the pure-Python serving core's: a list and the standard library's heapq (C, comparing
  Python ints).
* `KeyHeap`, the compiled core's (setup.py has the compiled serving import it in place of ListHeap):
  the keys in an array('q'), sifted here as C integers (heap.pxd), so a push or a pop makes no Python
  int. Uncompiled it runs as written (the tests compare it with ListHeap).
"""

from __future__ import annotations

import heapq
from array import array

MASK = 0xFFFFFFFF  # a key's request id (models.engine.serving `key`)


class ListHeap:
    __slots__ = ("a",)

    def __init__(self) -> None:
        self.a: list[int] = []

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


class KeyHeap:
    __slots__ = ("a", "n", "_a", "_cap")

    def __init__(self) -> None:
        self.a = array("q", bytes(8 * 64))  # keys in heap order; slots from n on are spare
        self._a = self.a  # (compiled: a typed view)
        self._cap = 64  # len(a), a C field where the compiled heap reads it
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter(self.a[: self.n])

    def _room(self) -> None:
        self._a = None  # (an array with a view cannot grow)
        self.a.extend(array("q", bytes(8 * len(self.a))))
        self._a = self.a
        self._cap = len(self.a)

    def push(self, x: int) -> None:
        if self.n == self._cap:
            self._room()
        self._a[self.n] = x
        self.n += 1
        _siftdown(self._a, 0, self.n - 1)

    def pop(self) -> int:
        """The least key, removed (IndexError if empty)."""
        if self.n == 0:
            raise IndexError("pop from an empty heap")
        a = self._a
        self.n -= 1
        last = a[self.n]
        if self.n:
            top = a[0]
            a[0] = last
            _siftup(a, 0, self.n)
            return top
        return last

    def top(self) -> int:
        if self.n == 0:
            raise IndexError("top of an empty heap")
        return self._a[0]

    def pop_due(self, t: int) -> int:
        """The least key, removed, if it is due by iteration t (key >> 32 <= t); else -1, nothing removed."""
        if self.n and self._a[0] >> 32 <= t:
            return self.pop()
        return -1

    def load(self, keys) -> None:
        """Hold exactly `keys`, in this order (a heap already: models.engine.tape copies one)."""
        self.n = 0
        for x in keys:
            self.push_raw(x)

    def push_raw(self, x: int) -> None:
        """Append without sifting (`load`)."""
        if self.n == self._cap:
            self._room()
        self._a[self.n] = x
        self.n += 1

    def take(self, rid: int) -> int:
        """Remove request rid's key and return it: the last key takes its place, then heapify."""
        a, n = self._a, self.n
        j = 0
        while j < n and a[j] & MASK != rid:
            j += 1
        if j == n:
            raise ValueError(f"request {rid} is not decoding")
        x = a[j]
        n -= 1
        a[j] = a[n]
        self.n = n
        i = n // 2 - 1
        while i >= 0:
            _siftup(a, i, n)
            i -= 1
        return x


def _siftdown(heap, start: int, pos: int) -> None:
    """The item at pos moves up past its larger parents (not above `start`)."""
    item = heap[pos]
    while pos > start:
        parent_pos = (pos - 1) >> 1
        parent = heap[parent_pos]
        if item < parent:
            heap[pos] = parent
            pos = parent_pos
            continue
        break
    heap[pos] = item


def _siftup(heap, pos: int, end: int) -> None:
    """The smaller child moves up until a leaf is free at pos's subtree; the item there goes to it
    and then up to its place (`_siftdown`). `end`: the heap's size."""
    start = pos
    item = heap[pos]
    child = 2 * pos + 1
    while child < end:
        right = child + 1
        if right < end and not heap[child] < heap[right]:
            child = right
        heap[pos] = heap[child]
        pos = child
        child = 2 * pos + 1
    heap[pos] = item
    _siftdown(heap, start, pos)
