"""How far serving engines may run ahead of the SimPy clock (sim.engine.Lookahead).

An engine may book iterations without yielding up to the first instant at which anything outside
the engines could look at them or put work on their links. Each such thing is a *source* (the
`Source` protocol): it says when it next will (`next_touch_at`) and calls its `bound_changed`
whenever that instant may have moved. The trainer's next policy decision (its step times are drawn
ahead), the monitor's next sample, a merge (now, while one runs), a GPU co-tenant's next switch, a
router's next arrival, ... The fleet registers them all in one place (sim.fleet `_lookahead_sources`);
the bound is the earliest of their instants, never past the end of the run; -inf while lookahead
is off. Sources are asked in the order registered, so the cheapest goes first.

Engines fed from outside (a disaggregated fleet's decode engines, sim.disagg) have a bound of their
own: their *feeder* (the `Feeder` protocol) says the earliest instant it may put a request into one of
them or read them (`feeds_at`), and they run ahead to the earlier of that and the fleet's bound; the
other engines do not wait for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from wadiloco.sim.engine import Lookahead

INF = float("inf")


class Source(Protocol):
    """Something that touches or reads the engines at instants it knows ahead."""

    bound_changed: Callable[[], None]  # set by LookaheadBound.register; call it when next_touch_at may move

    def next_touch_at(self) -> float:
        """The next instant it may touch or read an engine (-inf: unknown, now; +inf: never)."""
        ...


class Feeder(Protocol):
    """Something that puts requests into some engines from outside at instants it bounds ahead: those
    engines read `lookahead`, which the bound keeps at the earlier of the fleet's bound and `feeds_at`."""

    lookahead: Lookahead  # what its engines read
    bound_changed: Callable[[], None]  # set by LookaheadBound.register; call it when feeds_at may move

    def feeds_at(self) -> float:
        """The earliest instant it may put a request into or read one of its engines (-inf: unknown)."""
        ...


def unbound() -> None:
    """A source's `bound_changed` until it is registered: there is no bound to tell."""


class LookaheadBound:
    def __init__(self, end: float, enabled: bool = True):
        self.lookahead = Lookahead()  # what the engines read
        self.end = end
        self.enabled = enabled
        self.on = False  # until start(): the clock has not started
        self._sources: list[Callable[[], float]] = []
        self._feeders: list[Feeder] = []
        self._until = -INF  # the fleet's bound as last computed (what feeders' engines read is never later)

    def register(self, *sources: Source | Feeder) -> None:
        """Add sources, asked in this order, and feeders; each tells the bound when its instant may
        have moved."""
        for s in sources:
            if hasattr(s, "feeds_at"):
                s.bound_changed = self.fed_changed
                self._feeders.append(s)
                continue
            s.bound_changed = self.changed
            self._sources.append(s.next_touch_at)

    def start(self) -> None:
        self.on = self.enabled
        self.changed()

    def changed(self) -> None:
        if not self.on:
            self.lookahead.until = self._until = -INF
            for f in self._feeders:
                f.lookahead.until = -INF
            return
        t = INF
        for source in self._sources:
            s = source()
            if s < t:
                t = s
                if t == -INF:  # no bound: the later sources need not be asked
                    break
        self.lookahead.until = self._until = t if t < self.end else self.end
        if self._feeders:
            self.fed_changed()

    def fed_changed(self) -> None:
        """A feeder's instant may have moved: its engines' bound, under the fleet's."""
        if not self.on:
            return
        for f in self._feeders:
            t = f.feeds_at()
            f.lookahead.until = t if t < self._until else self._until
