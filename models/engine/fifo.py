"""An engine's request queues (models.engine.serving: `waiting`, `prefilling`): request ids, first in, first out.

The ids in a ring of array('q') slots, so a compiled core reads and writes them as C integers (a push,
a pop or a look at the j-th makes no Python int); both cores run this one class, and it holds the ids a
deque would, in the same order (tests/engine/test_serving_core.py).

The interface: `len` (and `n`, the same, a field), iteration and `in`; push(x) at the tail,
push_front(x) at the head (a preempted request), pop_front(), at(j) (the j-th from the head; negative
j from the tail), drop(k) (the first k), remove(x) (its first occurrence), load(ids) (hold exactly
these, a tape's copy).
"""

from __future__ import annotations

from array import array


class RingFifo:
    __slots__ = ("h", "n", "_a", "_m")

    def __init__(self) -> None:
        self._a = array("q", bytes(8 * 64))  # the ids in slots h, h + 1, ... (mod its length, a power of two)
        self.h = 0
        self.n = 0
        self._m = 63  # its length - 1

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter([self._a[(self.h + j) & self._m] for j in range(self.n)])

    def __contains__(self, x) -> bool:
        return any(self._a[(self.h + j) & self._m] == x for j in range(self.n))

    def _room(self) -> None:
        """Twice the slots, the ids unrolled to start at slot 0 (a new array: the compiled ring holds a
        view of the old one)."""
        ids = array("q", [self._a[(self.h + j) & self._m] for j in range(self.n)])
        ids.frombytes(bytes(8 * (2 * (self._m + 1) - self.n)))
        self._a = ids
        self._m = len(ids) - 1
        self.h = 0

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
