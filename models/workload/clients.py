"""Closed-loop clients: requests created by the engine's own completions, not drawn in advance.

A client belongs to one sidecar's engine (models.engine.serving.EngineState.attach) and is consulted only
when requests finish there, so a closed loop costs no SimPy process per user or per request.
- `BatchLoop`, the paper testbed's loop (docs/sources.md, testbed 2.2): a batch of c(t) requests is submitted
  at once at its start t; the next starts when the whole batch has finished, plus a gap; every
  request of a batch is done when the batch is (its end-to-end latency is the batch's wall time).
  c(t) is decided at batch start (2.4). Batches start while t < horizon ("while now < start +
  duration"); the last may finish after it (the run drains as usual).
- `UsersLoop`, a load generator with a concurrency cap: N users each send a request, wait for its
  answer, think, send the next (while the send time is < horizon).
Every request carries a tag (its batch, or its user), which is how the client knows its requests:
indices of requests that have not arrived yet move as others are inserted before them.
`lengths(index, size)` gives the prompt and output tokens of the `size` requests from global request
index `index` on (a prompt set is cycled by that index: models.workload.prompt_sets).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from wadiloco.models.results.invariants import InvariantError

Lengths = Callable[[int, int], tuple[np.ndarray, np.ndarray]]

HEAD = 64  # requests per client, in creation order, whose lengths identify a closed loop's load


class _Loop:
    """What both loops share: the serving window, the global index of the next request, and the
    token lengths of the first HEAD requests as they were created. Arrival times depend on the
    engine (so on the policy); what the clients send must not: this is what runs of one seed are
    compared by (load_hash), so a policy that disturbed the token streams shows as a mismatch."""

    def __init__(self, lengths: Lengths, start_s: float, horizon_s: float):
        self.lengths, self.start_s, self.horizon_s = lengths, start_s, horizon_s
        self.index = 0  # global request index of the next request
        self.head_prompt: list[int] = []
        self.head_output: list[int] = []

    @property
    def created(self) -> int:
        return self.index

    def _draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The lengths of the next n requests (noted while within the head); the index moves on."""
        prompt, output = self.lengths(self.index, n)
        self._note(prompt, output)
        self.index += n
        return prompt, output

    def _note(self, prompt, output) -> None:
        room = HEAD - len(self.head_prompt)
        if room > 0:
            self.head_prompt.extend(int(x) for x in prompt[:room])
            self.head_output.extend(int(x) for x in output[:room])


def load_hash(loops: list) -> str:
    """sha256 of every client's serving window and the lengths of its first HEAD requests."""
    h = hashlib.sha256()
    for c in loops:
        h.update(np.array([c.start_s, c.horizon_s], dtype="<f8").tobytes())
        for xs in (c.head_prompt, c.head_output):
            h.update(np.int64(len(xs)).tobytes())
            h.update(np.asarray(xs, dtype="<i8").tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class Concurrency:
    """Batch size at batch start t: `busy` if (t + phase_s) mod period_s < window_s, else `quiet`
    (the testbed's bursty profile, 2.4); steady is quiet == busy."""

    quiet: int
    busy: int
    period_s: float = math.inf
    window_s: float = 0.0
    phase_s: float = 0.0

    @classmethod
    def steady(cls, c: int) -> Concurrency:
        return cls(c, c)

    def at(self, t: float) -> int:
        if self.quiet == self.busy:
            return self.quiet
        return self.busy if (t + self.phase_s) % self.period_s < self.window_s else self.quiet


class BatchLoop(_Loop):
    """Whole batches, one after another (module docstring). `starts`, `sizes`, `ends` per batch."""

    def __init__(self, conc: Concurrency, lengths: Lengths, start_s: float, horizon_s: float, gap_s: float = 0.0):
        super().__init__(lengths, start_s, horizon_s)
        self.conc, self.gap_s = conc, gap_s
        self.starts: list[float] = []
        self.sizes: list[int] = []
        self.ends: list[float] = []
        self.out = 0  # requests of the current batch not finished

    def start(self, st) -> None:
        self._submit(st, self.start_s)

    def _submit(self, st, t: float) -> None:
        if not t < self.horizon_s:
            return
        c = self.conc.at(t)
        prompt, output = self._draw(c)
        st.add(t, prompt, output, len(self.starts))
        self.out = c
        self.starts.append(t)
        self.sizes.append(c)
        self.ends.append(math.nan)

    def finished(self, st, rids: list[int], end: float) -> None:
        self.out -= len(rids)
        if self.out == 0:
            self.ends[-1] = end
            self._submit(st, end + self.gap_s)

    def done_times(self, tag: np.ndarray) -> np.ndarray:
        """When each request (by its tag) was done as the client sees it: its batch's end."""
        return np.asarray(self.ends, dtype=np.float64)[tag] if len(tag) else np.empty(0)

    def check(self, arrival: np.ndarray, finish: np.ndarray, batch: np.ndarray) -> None:
        """The loop's invariants on one sidecar's request columns (any order)."""
        n_b = int(batch.max()) + 1 if len(batch) else 0
        if len(batch) != self.index or len(self.starts) != n_b or (len(batch) and batch.min() < 0):
            raise InvariantError(f"closed loop: {len(batch)} requests in {n_b} batches, client created {self.index}")
        if n_b == 0:
            if self.start_s < self.horizon_s:
                raise InvariantError("closed loop: no batch although serving starts before the horizon")
            return
        sizes = np.bincount(batch, minlength=n_b)
        start = np.full(n_b, np.nan)
        start[batch] = arrival
        if np.any(arrival != start[batch]):
            raise InvariantError("closed loop: the requests of a batch do not share its start")
        end = np.full(n_b, -np.inf)
        np.maximum.at(end, batch, np.where(np.isnan(finish), np.inf, finish))
        expect = [self.conc.at(float(t)) for t in start]
        if list(sizes) != expect:
            raise InvariantError("closed loop: a batch does not hold c(t) requests at its start")
        if start[0] != self.start_s or np.any(start >= self.horizon_s):
            raise InvariantError("closed loop: a batch started before serving starts or at/after the horizon")
        if np.any(start[1:] < end[:-1]) or np.any(start[1:] != end[:-1] + self.gap_s):
            raise InvariantError("closed loop: a batch started before the previous one ended (plus the gap)")
        if math.isfinite(end[-1]) and end[-1] + self.gap_s < self.horizon_s:
            raise InvariantError("closed loop: the loop stopped before the horizon")


class UsersLoop(_Loop):
    """N users, each with at most one request out (module docstring). `think(user)` gives a user's
    next think time (s, >= 0), deterministic per user whatever the order users finish in."""

    def __init__(self, users: int, think: Callable[[int], float], lengths: Lengths, start_s: float, horizon_s: float):
        super().__init__(lengths, start_s, horizon_s)
        self.users, self.think = users, think
        self.sent = [0] * users

    def start(self, st) -> None:
        for u in range(self.users):
            self._send(st, u, self.start_s)

    def _send(self, st, user: int, t: float) -> None:
        if not t < self.horizon_s:
            return
        prompt, output = self._draw(1)
        st.add(t, prompt, output, user)
        self.sent[user] += 1

    def finished(self, st, rids: list[int], end: float) -> None:
        tag = st.tag
        for rid in rids:
            user = tag[rid]
            self._send(st, user, end + self.think(user))

    def done_times(self, tag: np.ndarray) -> None:
        return None  # a user's request is done when the engine finishes it

    def check(self, arrival: np.ndarray, finish: np.ndarray, user: np.ndarray) -> None:
        if len(user) != self.index or list(np.bincount(user, minlength=self.users)) != self.sent:
            raise InvariantError(f"closed loop: {len(user)} requests recorded, users sent {self.index}")
        for u in range(self.users):
            mine = np.flatnonzero(user == u)
            a, f = arrival[mine], finish[mine]
            order = np.argsort(a, kind="stable")
            a, f = a[order], f[order]
            if len(a) and a[0] != self.start_s:
                raise InvariantError(f"closed loop: user {u}'s first request is not at the serving start")
            if np.any(np.isnan(f[:-1])) or np.any(a[1:] < f[:-1]) or np.any(a >= self.horizon_s):
                raise InvariantError(f"closed loop: user {u} had two requests out (or sent at/after the horizon)")


def tag_column(client) -> str:
    """The request-table column a closed loop's tags go to: `batch` or `user`."""
    return "batch" if isinstance(client, BatchLoop) else "user"


class ThinkTimes:
    """Per-user think times: constant, or exponential from a stream per user (drawn in blocks), so a
    user's k-th think time is the same in every run on the seed (common random numbers)."""

    BLOCK = 256

    def __init__(self, kind: str, value: float, rngs: Callable[[int], np.random.Generator], users: int):
        self.kind, self.value, self._rngs = kind, value, rngs
        self._gen: list[np.random.Generator | None] = [None] * users
        self._buf: list[list[float]] = [[] for _ in range(users)]

    def __call__(self, user: int) -> float:
        if self.kind == "constant":
            return self.value
        buf = self._buf[user]
        if not buf:
            if self._gen[user] is None:
                self._gen[user] = self._rngs(user)
            buf.extend(reversed(self._gen[user].exponential(self.value, self.BLOCK).tolist()))
        return buf.pop()
