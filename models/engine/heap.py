"""The decoders' finish heap: a min-heap of integer keys (models.engine.serving `key`: due << 32 | rid).

CPython's heapq algorithms (Lib/heapq.py: `_siftdown`, `_siftup`) on the keys in an array('q'), so a
compiled core sifts them as C integers and a push or a pop makes no Python int; both cores run this one
class, and it holds every key where heapq on a list would (tests/engine/test_serving_core.py).
"""

from __future__ import annotations

from array import array

MASK = 0xFFFFFFFF  # a key's request id (models.engine.serving `key`)


class KeyHeap:
    __slots__ = ("n", "_a", "_cap")

    def __init__(self) -> None:
        self._a = array("q", bytes(8 * 64))  # keys in heap order; slots from n on are spare
        self._cap = 64  # its length
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter([self._a[j] for j in range(self.n)])

    def _room(self) -> None:
        """Twice the slots (a new array: the compiled heap holds a view of the old one)."""
        keys = array("q", [self._a[j] for j in range(self.n)])
        keys.frombytes(bytes(8 * (2 * self._cap - self.n)))
        self._a = keys
        self._cap = len(keys)

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
