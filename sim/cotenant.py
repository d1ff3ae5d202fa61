"""A GPU co-tenant (the testbed's matmul stress process) as a user of the sidecars' GPU links.

While its timetable is on, the co-tenant holds each chosen sidecar's GPU link with weight w (a hold:
infinite work, sim.fabric), so a serving iteration there runs at 1/(1 + w) of full speed by weighted
fair sharing, not by a rule; on an unlimited GPU it changes nothing. Its plan (models.cotenant) gives
the fixed windows, already on the stress loop's poll grid, and the window after each merge end for a
`merges` timetable (`merge_ended`, called by the fleet when the trainer banks a merge).

Cheap by construction: one timeout per switch (no polling: the poll tick is computed), one fabric
start and stop per link and window, overlapping windows switched as one. It is a lookahead
source (sim.lookahead, `next_touch_at`): engines never run past an instant the co-tenant changes
their link.
"""

from __future__ import annotations

from bisect import insort

from wadiloco.models.cotenant import CotenantPlan
from wadiloco.models.results.run import NoExtra
from wadiloco.sim.engine import delay_to
from wadiloco.sim.fabric import INF, Fabric, Job, Link
from wadiloco.sim.lookahead import unbound


class Cotenant(NoExtra):
    """`log` records the windows as run: [on, off] each (off = +inf while on at the end)."""

    def __init__(self, env, plan: CotenantPlan, links: list[Link]):
        self.env = env
        self.plan = plan
        self.links = links
        self.bound_changed = unbound
        self.on = False
        self.log: list[list[float]] = []
        self._pending = plan.fixed_windows()  # sorted, disjoint (on, off) still to come
        self._i = 0  # the next of _pending
        self._off = INF  # while on: when the current window closes
        self._next = INF  # the next switch instant
        self._gen = 0  # stale timers carry an older generation
        self._holds: list[Job] = []

    def start(self) -> None:
        self._schedule()

    def next_touch_at(self) -> float:
        """A lookahead source (sim.lookahead): the next instant the co-tenant starts or stops holding a GPU link."""
        return self._next

    def merge_ended(self) -> None:
        """A merge just ended: add its window (a `merges` timetable), merged with what is planned."""
        w = self.plan.merge_window(self.env.now)
        if w is None:
            return
        if self.on and w[0] <= self._off:
            self._off = max(self._off, w[1])
            self._absorb()
        else:
            insort(self._pending, w, lo=self._i)
        self._schedule()

    def _schedule(self) -> None:
        t = self._off if self.on else (self._pending[self._i][0] if self._i < len(self._pending) else INF)
        self._next = t
        self._gen += 1
        if t < INF:
            gen = self._gen
            ev = self.env.timeout(delay_to(self.env.now, t) if t > self.env.now else 0.0)
            ev.callbacks.append(lambda _e: self._switch(gen))
        self.bound_changed()

    def _switch(self, gen: int) -> None:
        if gen != self._gen:
            return
        if self.on:
            Fabric.release(self._holds)
            self._holds = []
            self.on = False
            self.log[-1][1] = self.env.now
        else:
            on, self._off = self._pending[self._i]
            self._i += 1
            self._absorb()
            w = self.plan.weight
            self._holds = [lk.fabric.start([lk], INF, w, 1.0, ("cotenant", k)) for k, lk in enumerate(self.links)]
            self.on = True
            self.log.append([self.env.now, INF])
        self._schedule()

    def _absorb(self) -> None:
        """Fold planned windows that open before the current one closes into it."""
        while self._i < len(self._pending) and self._pending[self._i][0] <= self._off:
            self._off = max(self._off, self._pending[self._i][1])
            self._i += 1

    def windows(self) -> list[tuple[float, float]]:
        return [(a, b) for a, b in self.log]

    def summary(self, req, merges) -> dict:
        """Its block of the run's summary (models.results.run Extra): its weight and how long it was on."""
        wins, now = self.windows(), self.env.now
        return {
            "cotenant": {
                "weight": self.plan.weight,
                "windows": len(wins),
                "on_s": float(sum(min(b, now) - a for a, b in wins)),
            }
        }
