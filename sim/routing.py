"""The router in front of the sidecars on SimPy: one process that, at each arrival instant, asks
the scenario's router (models/routers) for a sidecar and hands it the request.

With `router.name: static` (the default) there is no process: the workload's own dealing is each
engine's pre-drawn arrivals, as before. Any other router takes the fleet-wide arrivals in time
order (ties in the dealt order) and routes each at its arrival instant, from a `View` of the
engines' present state. The router is a lookahead source (its next arrival), so no engine runs past
an instant it routes at, and it is each routed engine's `gate`: an idle engine waits until the
router's next instant instead of ending (models.engine.serving `serve`).
"""

from __future__ import annotations

import math

import numpy as np

from wadiloco.models.results.run import NoExtra
from wadiloco.models.rng import stream
from wadiloco.models.spec.run import RouterSpec
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.sim.engine import Sidecar, delay_to
from wadiloco.sim.lookahead import unbound

INF = math.inf
MERGE_TAGS = ("merge", "hold")  # jobs sim/merge.py puts on the links (a co-tenant's are "cotenant")


class View:
    """The present state of the sidecars, all a router may read (models.routers.RouterView)."""

    def __init__(self, sidecars: list[Sidecar]):
        self.sidecars = sidecars
        self.n = len(sidecars)
        self.now = 0.0

    def outstanding(self, s: int) -> int:
        sd = self.sidecars[s]
        return sd.queue_len(self.now) + sd.running()

    def kv_free(self, s: int) -> float:
        kv = self.sidecars[s].core.kv
        return INF if kv is None else kv.cap - kv.used

    def pressing(self, s: int) -> bool:
        sd = self.sidecars[s]
        return any(j.tag[0] in MERGE_TAGS for link in (sd.gpu, sd.host) for j in link.jobs)


def prefix_key(hashes) -> int:
    """A request's prefix key for the router: its first block's hash (requests that share their first
    block share it; models.routers.prefix_affinity), or -1 without hashes."""
    return int(hashes[0]) if hashes else -1


class RouterProc(NoExtra):
    """Routes the fleet's arrivals one instant at a time; `until` is the next instant (the engines'
    gate and a lookahead source: `next_touch_at`), `routed` how many went to each sidecar."""

    def __init__(self, env, router, sidecars: list[Sidecar], arrivals: list[Arrivals]):
        self.env, self.router, self.sidecars = env, router, sidecars
        self.bound_changed = unbound
        t = np.concatenate([a.t for a in arrivals]) if arrivals else np.empty(0)
        order = np.argsort(t, kind="stable")
        self.t = t[order].tolist()
        self.prompt = np.concatenate([a.prompt for a in arrivals])[order].tolist() if arrivals else []
        self.output = np.concatenate([a.output for a in arrivals])[order].tolist() if arrivals else []
        # each request's prompt block hashes (a trace's hash_ids, engine.shared_prefix), or None
        hs = [h for a in arrivals for h in (a.hashes if a.hashes is not None else (None,) * len(a))]
        self.hashes = [hs[k] for k in order] if any(h is not None for h in hs) else None
        self.view = View(sidecars)
        self.until = self.t[0] if self.t else INF
        self.routed = [0] * len(sidecars)
        for s in sidecars:  # (before the run: `serve` reads both when it starts)
            s.core.gate = self
            s.core.slow = True  # its booking refreshes the request count the router grows
        env.process(self._run())

    def next_touch_at(self) -> float:
        return self.until

    def _run(self):
        env, t, n, view, route, hashes = self.env, self.t, len(self.t), self.view, self.router.route, self.hashes
        j = 0
        while j < n:
            now = t[j]
            if env.now < now:
                yield env.timeout(delay_to(env.now, now))
            view.now = now
            while j < n and t[j] == now:
                hs = hashes[j] if hashes is not None else None
                s = route(view, self.prompt[j], self.output[j], prefix_key(hs))
                self.sidecars[s].core.route_in(now, self.prompt[j], self.output[j], 0, hs)
                self.routed[s] += 1
                j += 1
            self.until = t[j] if j < n else INF
            self.bound_changed()

    def summary(self, req, merges) -> dict:
        """Its block of the run's summary (models.results.run Extra): the router and how many it routed where."""
        return {
            "router": {"name": self.router.name, "params": self.router.p.model_dump(mode="json"), "routed": self.routed}
        }

    def delivered(self) -> list[Arrivals]:
        """Each sidecar's requests as routed (what its rows of the request table are), and the
        sidecars' result arrays as of now (they grew as requests came)."""
        out = []
        for s in self.sidecars:
            c = s.core
            s.admitted, s.first_token, s.finish = s.results()
            s.t_arr = np.array(c.t_arr, dtype=np.float64)
            out.append(Arrivals(s.t_arr.copy(), np.array(c.prompt, np.int64), np.array(c.output, np.int64)))
        return out


def routed_inputs(router: RouterSpec, arrivals: list[Arrivals]) -> list[Arrivals]:
    """What each engine starts with: the dealt arrivals, or (a router routes them) nothing."""
    if not router.routed:
        return arrivals
    empty = Arrivals(np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64))
    return [empty] * len(arrivals)


def make_router(router: RouterSpec, seed: int, env, sidecars: list[Sidecar], arrivals: list[Arrivals]):
    """The run's router process, or None for `static` (the engines keep the dealt arrivals); a
    lookahead source (sim.lookahead)."""
    if not router.routed:
        return None
    return RouterProc(env, router.cls(router.params, stream(seed, "router", router.name)), sidecars, arrivals)
