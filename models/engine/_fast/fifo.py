# cython: boundscheck=False, wraparound=False
"""An engine's request queues (models.engine.serving: `waiting`, `prefilling`): request ids, first in, first out.

Two classes with one interface, as models/engine/_fast/heap.py has two heaps, so that both hold the same ids in
the same order after every call (tests/engine/test_serving_core.py):

* `ListFifo`, the pure-Python serving core's: a deque (C), its methods under the interface's names.
* `RingFifo`, the compiled core's (setup.py has the compiled serving import it in place of ListFifo):
  the ids in a ring of array('q') slots, read and written as C integers (fifo.pxd), so a push, a pop
  or a look at the j-th makes no Python int and no Python call. Uncompiled it runs as written.

The interface: `len` (and `n`, the same, which the compiled core reads as a C field), iteration and
`in`; push(x) at the tail, push_front(x) at the head (a preempted request), pop_front(), at(j) (the
j-th from the head; negative j from the tail), drop(k) (the first k), remove(x) (its first
occurrence), load(ids) (hold exactly these, a tape's copy).
"""

from __future__ import annotations

from array import array
from collections import deque


class ListFifo(deque):
    __slots__ = ()
    n = property(deque.__len__)
    push = deque.append
    push_front = deque.appendleft
    pop_front = deque.popleft
    at = deque.__getitem__

    def drop(self, k: int) -> None:
        if k > len(self):
            raise IndexError(f"drop {k} of {len(self)}")
        for _ in range(k):
            self.popleft()

    def load(self, ids) -> None:
        self.clear()
        self.extend(ids)


class RingFifo:
    __slots__ = ("a", "h", "n", "_a", "_m")

    def __init__(self) -> None:
        self.a = array("q", bytes(8 * 64))  # the ids in slots h, h + 1, ... (mod len(a), a power of two)
        self._a = self.a  # (compiled: a typed view)
        self.h = 0
        self.n = 0
        self._m = 63  # len(a) - 1

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter([self._a[(self.h + j) & self._m] for j in range(self.n)])

    def __contains__(self, x) -> bool:
        return any(self._a[(self.h + j) & self._m] == x for j in range(self.n))

    def _room(self) -> None:
        """Twice the slots, the ids unrolled to start at slot 0."""
        ids = list(self)
        self._a = None  # (an array with a view cannot be replaced in place)
        self.a = array("q", bytes(16 * len(self.a)))
        self._a = self.a
        self._m = len(self.a) - 1
        self.h = 0
        for j in range(len(ids)):
            self._a[j] = ids[j]

    def push(self, x: int) -> None:
        if self.n > self._m:
            self._room()
        self._a[(self.h + self.n) & self._m] = x
        self.n += 1

    def push_front(self, x: int) -> None:
        if self.n > self._m:
            self._room()
        self.h = (self.h - 1) & self._m
        self._a[self.h] = x
        self.n += 1

    def pop_front(self) -> int:
        """The head's id, removed (IndexError if empty)."""
        if self.n == 0:
            raise IndexError("pop from an empty queue")
        x = self._a[self.h]
        self.h = (self.h + 1) & self._m
        self.n -= 1
        return x

    def at(self, j: int) -> int:
        if j < 0:
            j += self.n
        if j < 0 or j >= self.n:
            raise IndexError("queue index out of range")
        return self._a[(self.h + j) & self._m]

    def drop(self, k: int) -> None:
        if k < 0 or k > self.n:
            raise IndexError(f"drop {k} of {self.n}")
        self.h = (self.h + k) & self._m
        self.n -= k

    def remove(self, x: int) -> None:
        """The first occurrence of x goes; the ids behind it move up one (ValueError if absent)."""
        a, h, m, n = self._a, self.h, self._m, self.n
        j = 0
        while j < n and a[(h + j) & m] != x:
            j += 1
        if j == n:
            raise ValueError(f"{x} is not in the queue")
        while j < n - 1:
            a[(h + j) & m] = a[(h + j + 1) & m]
            j += 1
        self.n = n - 1

    def load(self, ids) -> None:
        self.h = self.n = 0
        for x in ids:
            self.push(x)
