"""How far serving engines may run ahead of the SimPy clock (sim.engine.Lookahead).

An engine may book iterations without yielding up to the first instant at which anything outside
the engines could look at them or put work on their links. Each such thing is a *source* that
says when it next will: the trainer's next policy decision (its step times are drawn ahead), the
monitor's next sample, a merge (now, while one runs), a GPU co-tenant's next switch. The bound
is the earliest of them, never past the end of the run; -inf while lookahead is off. Sources call
`changed` whenever their instant may have moved; they are asked in the order watched, so the
cheapest goes first.
"""

from __future__ import annotations

from collections.abc import Callable

from wadiloco.sim.engine import Lookahead

INF = float("inf")


class LookaheadBound:
    def __init__(self, end: float, enabled: bool = True):
        self.lookahead = Lookahead()  # what the engines read
        self.end = end
        self.enabled = enabled
        self.on = False  # until start(): the clock has not started
        self._sources: list[Callable[[], float]] = []

    def watch(self, *sources: Callable[[], float]) -> None:
        """Add sources: callables giving the next instant each will touch or read an engine."""
        self._sources.extend(sources)

    def start(self) -> None:
        self.on = self.enabled
        self.changed()

    def changed(self) -> None:
        if not self.on:
            self.lookahead.until = -INF
            return
        t = INF
        for source in self._sources:
            s = source()
            if s < t:
                t = s
                if t == -INF:  # no bound: the later sources need not be asked
                    break
        self.lookahead.until = t if t < self.end else self.end
