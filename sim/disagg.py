"""Disaggregated prefill/decode serving on SimPy (DistServe, Splitwise, Mooncake; `disagg:`).

The sidecars of `disagg.prefill_sidecars` only prefill. The fleet's arrivals (every sidecar's
workload stream, so the load is the colocated fleet's), merged in time order, are dealt to them
round-robin; each runs as a request whose output is cut to its first token. The prefill engines'
client (`_Prefills`, models.workload.clients' interface: `start`, `finished`) hears of each one finished
and starts its hand-off (`_handoff`): the decode sidecar is picked at that instant (fewest requests
waiting, running or in transfer to it, on the prefill's island if it has any, ties to the lowest
index), the request's KV (prompt tokens x bytes per token) moves as one flow over the network
fabric's links between the two hosts (NIC, switch backplane, island uplinks: the links the
all-reduce and checkpoint writes share by max-min; the host's PCIe when both are on one host),
and when it is in the decode engine admits the request with its whole prompt cached, to produce
the rest of its output. A request wanting one token is done at its prefill: no transfer.

Timing (TTFT, Splitwise's definition): the first token reaches the client when the decode side
holds the KV, so first_token = the transfer's end, and TTFT = queueing + prefill + KV transfer;
TPOT is the decode side's. A request is one row of the request table (its prefill sidecar's),
with `kv_transfer_s` and `decode_sidecar`; its prefill is never a row of its own.

Hand-offs enter decode engines from outside (models.engine.serving `route_in`), so the decode engines
run on a bound of their own (sim.lookahead `Feeder`), under the fleet's: nothing enters or reads them
before the earliest of a hand-off still to pick its decoder, a prefill engine's next wake-up (before
it, it ends no prefill; now while its run is cut short), and the next completion on a fabric a KV
flow is on (a flow's finish moves only when its fabric re-allocates: at a flow's start or end, which
this bounds, or at merge work, which the fleet's bound covers); now while a finished flow's request
has not entered yet (Fabric.unheard). Decode engines book the iterations before that bound without
an event, but never fast-forward (a run in flight would not stop for a request entering mid-way); an
idle decode engine's process ends and starts again with its next request. Prefill engines step one
iteration at a time, so that each prefill ends at an event at that very instant, where its hand-off
starts (a SimPy wait to a step booked ahead of the clock can end an ulp late: sim.engine delay_to).
All exact: lookahead on and off give the same bytes (tests/sim/test_disagg.py). With swap preemption
(copies over the PCIe a same-host hand-off crosses) the decode engines step one at a time too.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from wadiloco.models.engine._fast import (
    serve,  # compiled or pure (models/engine/_fast/__init__.py), as sim.engine runs it
)
from wadiloco.models.results import invariants as inv
from wadiloco.models.results.run import NoExtra
from wadiloco.models.spec.run import RunSpec
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.sim.build import sidecar
from wadiloco.sim.engine import Lookahead, Sidecar, delay_to
from wadiloco.sim.fabric import INF, Link
from wadiloco.sim.lookahead import unbound
from wadiloco.sim.resources import Resources
from wadiloco.sim.topology import route

NAN = math.nan
BEFORE = 1.0 - 2.0**-50  # x * BEFORE: a few ulps below x >= 0
EMPTY = Arrivals(np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64))


class _Fed:
    """The gate of an engine fed from outside (hand-offs, fetches): nothing is known ahead, so an idle
    engine's process ends (`enter` starts it again). Not models.engine.serving's NO_GATE, so the monitor
    samples these engines as they are (sim.monitor.lazy_ok: their arrays are not their arrivals)."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = INF


FED = _Fed()


def fed(sd: Sidecar) -> Sidecar:
    """Sidecar `sd` as an engine fed from outside: its booking refreshes the request count entries
    grow (`slow`), and it has the FED gate."""
    sd.core.slow, sd.core.gate = True, FED
    return sd


def enter(env, sd: Sidecar, prompt: int, output: int, cached: int, hashes=None) -> int:
    """A request enters sidecar `sd`'s engine now from outside (a hand-off, a fetch: route_in, with
    `cached` prompt tokens whose KV came with it); an idle engine (its process ended) starts again,
    stepping one iteration at a time. Returns the request's index in that engine."""
    core = sd.core
    core.route_in(env.now, prompt, output, cached=cached, hashes=hashes)
    if not sd.proc.is_alive:
        core.now = max(core.now, env.now)
        sd.proc = env.process(serve(core, sd, sd.la, False))
    return core.n - 1


def kv_links(per_host: int, res: Resources, p: int, d: int) -> list[Link]:
    """What a KV flow from sidecar p's host to sidecar d's host (`per_host` sidecars each) crosses: the
    fewest-hop route's edges and the backplane of every switch on it (as sim.merge routes the
    all-reduce); one host's PCIe if both are on it (an assumption: no NVLink between its GPUs is modelled)."""
    hp, hd = res.hosts[p // per_host], res.hosts[d // per_host]
    if hp is hd:
        return [hp.pcie]
    net = res.net
    edges = route(net.graph, hp.name, hd.name)
    nodes = [edges[0][0]] + [v for _, v in edges]
    return [net.edge_links[e] for e in edges] + [net.backplanes[x] for x in nodes if x in net.backplanes]


class KVRoutes:
    """`kv_links` of each pair of sidecars, found once (the topology is static; a run hands off or
    fetches thousands of times over a few pairs)."""

    def __init__(self, per_host: int, res: Resources):
        self.per_host, self.res = per_host, res
        self._known: dict[tuple[int, int], tuple[Link, ...]] = {}

    def __call__(self, p: int, d: int) -> list[Link]:
        got = self._known.get((p, d))
        if got is None:
            got = self._known[(p, d)] = tuple(kv_links(self.per_host, self.res, p, d))
        return list(got)  # (a job's own list)


class _Prefills:
    """One prefill engine's client: it submits the engine's dealt requests (tag: the fleet-wide
    request index) at start, each wanting one token, and passes each finished one on."""

    def __init__(self, owner: Disagg, mine: np.ndarray):
        self.owner, self.mine = owner, mine

    def start(self, st) -> None:
        o = self.owner
        for j in self.mine.tolist():
            st.add(float(o.t[j]), [int(o.prompt[j])], [1], j)

    def finished(self, st, rids: list[int], end: float) -> None:
        tag = st.tag
        for rid in rids:
            self.owner.prefilled(tag[rid], end)


class Disagg(NoExtra):
    """The prefill and decode sidecars of one run and the hand-offs between them. Per request
    (fleet-wide index j, in arrival order): its prefill sidecar, when its prefill ended, when its
    KV was in, its decode sidecar and its index there."""

    def __init__(self, env, spec: RunSpec, arrivals: list[Arrivals], res, la):
        self.env, self.res = env, res
        fc = spec.fleet
        n, per_host = fc.n_sidecars, fc.sidecars_per_host
        self.per_host, self.per_island = per_host, per_host * fc.hosts_per_island
        self._links = KVRoutes(per_host, res)
        self.prefill = list(spec.disagg.prefill_sidecars)
        self.decode = [s for s in range(n) if s not in set(self.prefill)]
        t = np.concatenate([a.t for a in arrivals]) if arrivals else np.empty(0)
        order = np.argsort(t, kind="stable")  # ties in the dealt (sidecar) order
        self.t = t[order]
        self.prompt = np.concatenate([a.prompt for a in arrivals])[order].astype(np.int64)
        self.output = np.concatenate([a.output for a in arrivals])[order].astype(np.int64)
        m = len(self.t)
        self.by = np.array(self.prefill, dtype=np.int64)[np.arange(m) % len(self.prefill)]  # round-robin
        self.prefill_done, self.kv_done = np.full(m, NAN), np.full(m, NAN)
        self.dest, self.drid = np.full(m, -1, np.int64), np.full(m, -1, np.int64)
        self.inflight = [0] * n
        self.bytes_per_token = spec.disagg.kv_bytes_per_token
        self.kv_bytes = 0.0
        self.bound_changed = unbound
        self.lookahead = Lookahead()  # the decode engines' bound (sim.lookahead Feeder: feeds_at)
        step = Lookahead()  # the prefill engines' (-inf for good: they step one iteration at a time)
        self._due: list[float] = []  # (a heap) when each hand-off still to pick its decoder does so
        self._wake = [-INF] * len(self.prefill)  # each prefill engine's next wake-up (`_waits`)
        self._moving: dict = {}  # fabric -> KV flows started on it whose request has not entered yet
        e = spec.engine
        self.sidecars = []
        for s in range(n):
            pre = s in set(self.prefill)
            client = _Prefills(self, np.flatnonzero(self.by == s)) if pre else None
            hr, j = res.hosts[s // per_host], s % per_host
            bound = step if pre else self.lookahead
            self.sidecars.append(
                sidecar(env, s, EMPTY, e, hr, j, bound, fast_forward=e.fast_forward and pre, client=client)
            )
            if pre:
                self._waits(self.sidecars[-1], self.prefill.index(s))
            else:
                fed(self.sidecars[-1])
        self._prefills = [self.sidecars[p] for p in self.prefill]
        # swap copies would re-allocate the PCIe a same-host hand-off crosses at instants this does not bound
        self._bounded = not any(sd.core.kv is not None and sd.core.kv.swap for sd in self.sidecars)

    # -- the decode engines' bound (sim.lookahead Feeder) -----------------------------------------
    def feeds_at(self) -> float:
        """Before this instant no request enters a decode engine and nothing reads one: the earliest
        hand-off still to pick its decoder, prefill engine's wake-up (before it, it reports no prefill
        end) and next completion on a fabric a KV flow is on; now while a finished flow's request has
        not entered (its fabric's `unheard`)."""
        if not self._bounded:
            return -INF
        t = self._due[0] if self._due else INF
        for k, sd in enumerate(self._prefills):
            if self._wake[k] < t and sd.proc.is_alive:
                t = self._wake[k]
        for fabric in self._moving:
            if fabric.unheard:
                return self.env.now
            if fabric.next_at < t:
                t = fabric.next_at
        return t

    def _waits(self, sd: Sidecar, k: int) -> None:
        """Prefill engine k (sidecar `sd`) keeps its next wake-up: its Clock's `wait` (a SimPy timeout)
        ends then, unless its run is cut short (merge work on its links came or went), when its next
        prefill end is unknown until it waits again: now, until then."""
        env = self.env

        def wait(delay: float):
            # the instant SimPy fires it at, less the ulp its step's end may be before it (sim.engine delay_to)
            self._wake[k] = (env.now + delay) * BEFORE
            self.bound_changed()
            return env.timeout(delay)

        def cut() -> None:
            self._wake[k] = env.now
            self.bound_changed()

        sd.wait, sd.on_cut = wait, cut

    # -- the hand-off ----------------------------------------------------------------------------
    def prefilled(self, j: int, end: float) -> None:
        """Request j's prefill ended at `end` (its first token): done, or its KV goes to a decoder."""
        self.prefill_done[j] = end
        if self.output[j] <= 1:
            self.kv_done[j] = end
            return
        heapq.heappush(self._due, end)  # (now: not before the bound its engine's wake-up kept)
        self.env.process(self._handoff(j, end))

    def _handoff(self, j: int, end: float):
        env = self.env
        if env.now < end:  # (an engine that booked its step ahead of the clock: not a prefill engine here)
            yield env.timeout(delay_to(env.now, end))
        heapq.heappop(self._due)  # (the earliest: this one, or one due at the same instant)
        d = self._pick(int(self.by[j]))
        self.dest[j] = d
        self.inflight[d] += 1
        nbytes = float(self.prompt[j]) * self.bytes_per_token
        self.kv_bytes += nbytes
        links = self._links(int(self.by[j]), d)
        fabric = links[0].fabric
        self._moving[fabric] = self._moving.get(fabric, 0) + 1
        job = fabric.start(links, nbytes * 8 / 1e9, 1.0, INF, ("disagg", "kv"))
        self.bound_changed()
        if not job.done.triggered:
            yield job.done
        self.inflight[d] -= 1
        self.kv_done[j] = env.now
        self._enter(j, d)
        left = self._moving[fabric] - 1
        if left:
            self._moving[fabric] = left
        else:
            del self._moving[fabric]
        self.bound_changed()  # (before a decode engine this entry started runs)

    def _enter(self, j: int, d: int) -> None:
        """Request j's KV is in decode sidecar d: it joins d's queue with its whole prompt cached and
        its output less the token its prefill made."""
        p = int(self.prompt[j])
        self.drid[j] = enter(self.env, self.sidecars[d], p, int(self.output[j]) - 1, p)

    def _pick(self, p: int) -> int:
        """The decode sidecar for a request prefilled on p: on p's island if it has one, else any;
        the fewest requests waiting, running or in transfer to it; ties to the lowest index."""
        per_island = self.per_island
        near = [d for d in self.decode if d // per_island == p // per_island] or self.decode
        now = self.env.now

        def load(d: int) -> tuple[int, int]:
            c = self.sidecars[d].core
            return c.queue_len(now) + c.running() + self.inflight[d], d

        return min(near, key=load)

    # -- results ---------------------------------------------------------------------------------
    def per_sidecar(self) -> list[tuple]:
        """request_table's input: each request once, on its prefill sidecar's rows: admitted at its
        prefill, its first token when its KV was in, finished at its decoder (or at its prefill, for
        one token); with `kv_transfer_s` (0 for one token) and `decode_sidecar` (-1: none)."""
        adm, fin = np.full(len(self.t), NAN), np.full(len(self.t), NAN)
        for p in self.prefill:
            core = self.sidecars[p].core
            adm[np.array(core.tag, dtype=np.int64)] = self.sidecars[p].results()[0]
        one = self.output <= 1
        fin[one] = self.prefill_done[one]
        for d in self.decode:
            mine = (self.dest == d) & (self.drid >= 0)
            fin[mine] = self.sidecars[d].results()[2][self.drid[mine]]
        kv_s = self.kv_done - self.prefill_done
        out = []
        for s in range(len(self.sidecars)):
            m = self.by == s
            extra = {"kv_transfer_s": kv_s[m], "decode_sidecar": self.dest[m]}
            out.append((self.t[m], self.prompt[m], self.output[m], adm[m], self.kv_done[m], fin[m], extra))
        return out

    def summary(self, req, merges) -> dict:
        """Its block of the run's summary (models.results.run Extra): the KV hand-offs."""
        moved = self.dest >= 0
        kv_s = (self.kv_done - self.prefill_done)[moved]
        kv_s = kv_s[~np.isnan(kv_s)]
        return {"disagg": self._figures(moved, kv_s)}

    def _figures(self, moved: np.ndarray, kv_s: np.ndarray) -> dict:
        return {
            "prefill_sidecars": list(self.prefill),
            "decode_sidecars": list(self.decode),
            "kv_bytes_per_token": self.bytes_per_token,
            "kv_transfers": int(moved.sum()),
            "kv_bytes": self.kv_bytes,
            "kv_transfer_mean_s": float(kv_s.mean()) if len(kv_s) else 0.0,
            "kv_transfer_max_s": float(kv_s.max()) if len(kv_s) else 0.0,
        }

    def check(self, req, merges) -> None:
        """INV-1 per engine (a prefill engine's requests are those dealt to it, a decode engine's
        those handed to it), KV conservation (INV-23), and the hand-off's order: prefill end <= KV
        in <= decode admission."""
        now = self.env.now
        for s, sd in enumerate(self.sidecars):
            if s in self.prefill:
                mine = self.by == s
                n, done = int(mine.sum()), int((~np.isnan(self.prefill_done[mine])).sum())
            else:
                mine = (self.dest == s) & (self.drid >= 0)
                n, done = int(mine.sum()), int((~np.isnan(sd.results()[2])).sum())
            inv.check_conservation(s, sd.counts(now), n, done)
            inv.check_kv(s, sd.core)
        for d in self.decode:
            mine = (self.dest == d) & (self.drid >= 0)
            adm = self.sidecars[d].results()[0][self.drid[mine]]
            with np.errstate(invalid="ignore"):
                if np.any(self.kv_done[mine] < self.prefill_done[mine]) or np.any(adm < self.kv_done[mine]):
                    raise inv.InvariantError(f"disagg: a hand-off to sidecar {d} out of order")


def make_disagg(env, spec: RunSpec, arrivals: list[Arrivals], res: Resources, la: Lookahead):
    """The run's disaggregated sidecars (None without `disagg:`); a lookahead source. What disagg
    rules out (a closed loop, a router, a prefix cache) models.spec.resolve has checked."""
    return Disagg(env, spec, arrivals, res, la) if spec.disagg is not None else None
