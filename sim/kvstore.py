"""A remote KV/prefix pool on SimPy (Mooncake's distributed KV pool, LMCache's peer sharing; `remote_kv:`).

With `engine.prefix_cache` on, every sidecar's prefix cache (models.engine.prefix) is also a pool the others
read. When a request arrives, its own sidecar's cache and every other's are asked how many of its
leading prompt blocks they hold (`lookup`, no side effect); if another holds more (ties: the same
host, then the same island, then the lowest index), the KV of the tokens its own lacks (never the
prompt's last token, whose logits the engine computes) moves as one flow from that sidecar's host to
its own over the network fabric's links (NICs, switch backplanes, island uplinks: shared by max-min
with the all-reduce and the checkpoint writes; one host's PCIe within a host), and only then does
the request enter its engine, those tokens cached (models.engine.serving `route_in(..., cached=...)`); its
own cache's hits it finds at admission as ever. TTFT waits for the fetch. A request with nothing to
fetch enters at its arrival. The blocks are read as they are when the fetch starts (an eviction
meanwhile does not cancel it: an assumption), and the pool is only the sidecars' caches (no tier
beyond them).

Requests enter engines at instants no source knows ahead (a fetch's end), so, as for disaggregated
serving (sim.disagg), lookahead is off while any is still to enter and engines step one iteration at
a time; an idle engine's process ends and starts again with its next request. Both are exact.
"""

from __future__ import annotations

import math

import numpy as np

from wadiloco.models.results import invariants as inv
from wadiloco.models.results.run import NoExtra
from wadiloco.models.spec.run import RunSpec
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.sim.build import prefix_cache, sidecar
from wadiloco.sim.disagg import EMPTY, KVRoutes, enter, fed
from wadiloco.sim.engine import delay_to
from wadiloco.sim.fabric import INF
from wadiloco.sim.lookahead import unbound

NAN = math.nan


class RemoteKV(NoExtra):
    """The sidecars of a run whose prefix caches are one pool, and the fetches between them. Per
    sidecar and request (its index in the sidecar's arrivals): the request's index in the engine, when
    it entered (its arrival, or its fetch's end) and the prompt tokens it fetched."""

    def __init__(self, env, spec: RunSpec, arrivals: list[Arrivals], res, la):
        self.env, self.res, self.arr = env, res, arrivals
        e, fc = spec.engine, spec.fleet
        self.per_host, self.per_island = fc.sidecars_per_host, fc.sidecars_per_host * fc.hosts_per_island
        self._links = KVRoutes(self.per_host, res)
        self.sidecars = []
        for s in range(fc.n_sidecars):
            hr, j = res.hosts[s // self.per_host], s % self.per_host
            self.sidecars.append(
                sidecar(env, s, EMPTY, e, hr, j, la, fast_forward=False, prefix=prefix_cache(e.prefix))
            )
            fed(self.sidecars[-1]).t_arr = arrivals[s].t  # the monitor counts arrivals as they arrive
        self.rid = [np.full(len(a.t), -1, np.int64) for a in arrivals]
        self.entered = [np.full(len(a.t), NAN) for a in arrivals]
        self.fetched = [np.zeros(len(a.t), np.int64) for a in arrivals]
        self.pending = sum(len(a.t) for a in arrivals)
        self.bytes_per_token = spec.remote_kv.kv_bytes_per_token
        self.fetched_bytes = 0.0
        self.bound_changed = unbound
        env.process(self._run())

    def next_touch_at(self) -> float:
        """A lookahead source (sim.lookahead): -inf while a request may still enter an engine."""
        return -INF if self.pending else INF

    def _run(self):
        """The fleet's arrivals in time order (ties in sidecar order), each at its instant."""
        env = self.env
        t = np.concatenate([a.t for a in self.arr]) if self.arr else np.empty(0)
        who = np.concatenate([np.full(len(a.t), s) for s, a in enumerate(self.arr)]) if self.arr else t
        idx = np.concatenate([np.arange(len(a.t)) for a in self.arr]) if self.arr else t
        for j in np.argsort(t, kind="stable").tolist():
            if env.now < t[j]:
                yield env.timeout(delay_to(env.now, float(t[j])))
            self._arrive(int(who[j]), int(idx[j]))

    def _arrive(self, s: int, i: int) -> None:
        a = self.arr[s]
        hs = a.hashes[i] if a.hashes is not None else None
        own, peer, k = self._best(s, hs)
        last = int(a.prompt[i]) - 1
        bt = self.sidecars[s].core.px.block_tokens
        got, have = min(k * bt, last), min(own * bt, last)
        if peer is None or got <= have:
            self._in(s, i, 0, hs)
            return
        self.env.process(self._fetch(s, i, peer, got, have, hs))

    def _best(self, s: int, hs) -> tuple[int, int | None, int]:
        """(leading blocks of `hs` s's cache holds, the sidecar holding the most if more, how many)."""
        if not hs:
            return 0, None, 0
        own = self.sidecars[s].core.px.lookup(hs)
        best, peer = own, None
        for q in self._near(s):
            k = self.sidecars[q].core.px.lookup(hs)
            if k > best:
                best, peer = k, q
        return own, peer, best

    def _near(self, s: int):
        """The other sidecars, nearest first: on s's host, then on its island, then the rest, each by
        index (as sorting by (other host, other island, index) orders them)."""
        h0, i0 = s - s % self.per_host, s - s % self.per_island
        h1, i1 = h0 + self.per_host, i0 + self.per_island
        yield from (q for q in range(h0, h1) if q != s)
        yield from range(i0, h0)
        yield from range(h1, i1)
        yield from range(0, i0)
        yield from range(i1, len(self.sidecars))

    def _fetch(self, s: int, i: int, peer: int, got: int, have: int, hs):
        nbytes = float(got - have) * self.bytes_per_token
        self.fetched_bytes += nbytes
        links = self._links(peer, s)
        job = links[0].fabric.start(links, nbytes * 8 / 1e9, 1.0, INF, ("remote_kv", "fetch"))
        if not job.done.triggered:
            yield job.done
        self.fetched[s][i] = got - have
        self._in(s, i, got, hs)

    def _in(self, s: int, i: int, cached: int, hs) -> None:
        a = self.arr[s]
        self.rid[s][i] = enter(self.env, self.sidecars[s], int(a.prompt[i]), int(a.output[i]), cached, hs)
        self.entered[s][i] = self.env.now
        self.pending -= 1
        if not self.pending:
            self.bound_changed()

    # -- results ---------------------------------------------------------------------------------
    def per_sidecar(self) -> list[tuple]:
        """request_table's input: each request in its sidecar's arrival order, its times from the
        engine, with `kv_fetch_s` (its entry minus its arrival: 0 without a fetch) and
        `kv_fetched_tokens`."""
        out = []
        for s, (sd, a) in enumerate(zip(self.sidecars, self.arr)):
            rid, ok = self.rid[s], self.rid[s] >= 0
            cols = []
            for x in sd.results():
                v = np.full(len(a.t), NAN)
                v[ok] = x[rid[ok]]
                cols.append(v)
            extra = {"kv_fetch_s": self.entered[s] - a.t, "kv_fetched_tokens": self.fetched[s]}
            out.append((a.t, np.asarray(a.prompt, np.int64), np.asarray(a.output, np.int64), *cols, extra))
        return out

    def summary(self, req, merges) -> dict:
        """Its block of the run's summary (models.results.run Extra): the fetches."""
        return {"remote_kv": self._figures()}

    def _figures(self) -> dict:
        f = np.concatenate(self.fetched) if self.fetched else np.empty(0, np.int64)
        waits = np.concatenate([e - a.t for e, a in zip(self.entered, self.arr)]) if self.arr else np.empty(0)
        waits = waits[(f > 0) & ~np.isnan(waits)]
        return {
            "fetches": int((f > 0).sum()),
            "fetched_tokens": int(f.sum()),
            "fetched_bytes": self.fetched_bytes,
            "fetch_mean_s": float(waits.mean()) if len(waits) else 0.0,
            "fetch_max_s": float(waits.max()) if len(waits) else 0.0,
        }

    def check(self, req, merges) -> None:
        """INV-1 per engine over the requests that entered it, and KV conservation (INV-23)."""
        now = self.env.now
        for s, sd in enumerate(self.sidecars):
            n = int((self.rid[s] >= 0).sum())
            inv.check_conservation(s, sd.counts(now), n, int((~np.isnan(sd.results()[2])).sum()))
            inv.check_kv(s, sd.core)


def make_remote_kv(env, spec: RunSpec, arrivals: list[Arrivals], res, la):
    """The run's pooled-cache sidecars (None without `remote_kv:`); a lookahead source. What remote_kv
    needs (a prefix cache, open-loop arrivals, no router) models.spec.resolve has checked."""
    return RemoteKV(env, spec, arrivals, res, la) if spec.remote_kv is not None else None
