# cython: boundscheck=False, wraparound=False
"""The decoders' finish heap for the compiled serving core: heapq's push, pop and heapify on a list of
integer keys (models.serving `key`), compared as C integers when compiled (heap.pxd).

The pure-Python serving core uses the standard library's heapq (C, comparing Python ints); setup.py
has the compiled serving core import these instead. They are CPython's own algorithms (Lib/heapq.py:
`_siftdown`, `_siftup`), so the list holds the same items in the same places after every call as with
heapq (tests/test_serving_core.py), and both cores pop the same keys in the same order.
"""

from __future__ import annotations


def heappush(heap: list, item: int) -> None:
    heap.append(item)
    _siftdown(heap, 0, len(heap) - 1)


def heappop(heap: list) -> int:
    last = heap.pop()  # (IndexError if empty, as heapq)
    if heap:
        top = heap[0]
        heap[0] = last
        _siftup(heap, 0)
        return top
    return last


def heapify(heap: list) -> None:
    for i in range(len(heap) // 2 - 1, -1, -1):
        _siftup(heap, i)


def _siftdown(heap: list, start: int, pos: int) -> None:
    """The item at pos moves up past its larger parents (not above `start`)."""
    item = heap[pos]
    v = item  # (compiled: its value as a C integer; the list keeps the objects)
    while pos > start:
        parent_pos = (pos - 1) >> 1
        parent = heap[parent_pos]
        pv = parent
        if v < pv:
            heap[pos] = parent
            pos = parent_pos
            continue
        break
    heap[pos] = item


def _siftup(heap: list, pos: int) -> None:
    """The smaller child moves up until a leaf is free at pos's subtree; the item there goes to it
    and then up to its place (`_siftdown`)."""
    end, start = len(heap), pos
    item = heap[pos]
    child = 2 * pos + 1
    while child < end:
        right = child + 1
        if right < end:
            cv, rv = heap[child], heap[right]
            if not cv < rv:
                child = right
        heap[pos] = heap[child]
        pos = child
        child = 2 * pos + 1
    heap[pos] = item
    _siftdown(heap, start, pos)
