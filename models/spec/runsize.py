"""How big a run is, estimated from its resolved spec (models.spec.run.RunSpec) before anything is built:
one term per cost driver, each with how many items the run does, the simulation work they take (in
events: one SimPy event is about 10 us on this project's machine class, 2 cores, CPython 3.11), the
memory they hold, and the scenario field that sets them. models.spec.limits refuses a run whose
estimate is over a limit and names the field of its largest term.

The drivers and what an item costs (set with `python -m wadiloco.benchmarks.runsize`, which runs a small
case per driver; tests/spec/test_runsize.py holds each count to 0.8-1.25x of the run's own counter):
- requests: open-loop arrivals (load x a sidecar's capacity x sidecars x horizon, or a trace's), or
  what closed-loop clients create (a batch's or a user's cycle from the engine's iteration time): 3
  events and 250 bytes each; behind a router, a decision each that reads every sidecar (1 event and
  1/20 per sidecar);
- island steps (2 events each), monitor samples (1 event plus half an event per sidecar it reads, one
  per island it looks ahead to and a tenth per host), sidecars and hosts (50 events and 10 kB each);
- merges: one per h_min steps and merge time at most (a policy that ignores the corridor, such as a
  replay, says how many it makes, and the scheduled instants it walks through cost 1/10 event each),
  10 events per host per Streaming DiLoCo fragment, more when fragments run at once;
- host-core preemptions (fleet.host_cores): each engine and frontend thread is preempted at the
  oversubscription law's rate (models.training.host) while more threads are runnable than cores:
  8 events and 300 bytes each;
- KV flows (disagg:, remote_kv:): hand-offs and fetches over the network fabric, 4 events each plus
  1/200 event per flow in flight at each of their two re-allocations (models.network.fairshare); the
  flows in flight come from a processor-sharing queue at the link each binds on, and a link offered
  more than it carries holds a backlog that grows for the whole horizon ("a backlog grows": a fluid
  processor-sharing queue over the flows' sizes, where the small ones finish and the large ones
  pile up). Engines
  fed from outside take an event per iteration, at most: a remote pool's engines step one at a
  time, a disaggregated fleet's prefill engines too, and its decode engines book the iterations
  before the next hand-off, prefill step or KV completion at once (0.78 events an iteration in
  benchmarks/fabric.py's disagg_7p1, counted as 1); a remote pool's arriving request asks every
  sidecar's prefix cache (1/10 event per cache);
- co-tenant windows: two switches each, each cutting the engines on every GPU it shares.
Every limit is an environment variable (models.spec.limits), so a user who means it can raise it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from wadiloco.models.engine.batching import compose
from wadiloco.models.engine.capacity import sidecar_capacity_rps
from wadiloco.models.engine.laws import law_of
from wadiloco.models.spec.run import RunSpec

BASE_BYTES = 100e6  # the interpreter, numpy, pandas and the simulator's code
FLOW_EVENTS = 0.005  # a re-allocation's cost per flow in flight (C loops over arrays: ~50 ns)
LOOKUP_EVENTS = 0.1  # a remote-KV prefix-cache lookup (one sidecar's cache, for one arriving request)
ROUTE_EVENTS = 0.05  # a router reading one sidecar for one request


@dataclass(frozen=True)
class Term:
    """One cost driver: `count` items of `what`, `events` of work, `bytes` of memory, set by `field`."""

    count: float
    events: float
    bytes: float
    field: str
    what: str


@dataclass(frozen=True)
class Estimate:
    """What one run of a scenario does, roughly: a term per cost driver."""

    terms: dict[str, Term]
    base_bytes: float

    @property
    def counts(self) -> dict[str, float]:
        return {k: t.count for k, t in self.terms.items()}

    @property
    def events_by(self) -> dict[str, float]:
        return {k: t.events for k, t in self.terms.items()}

    @property
    def bytes_by(self) -> dict[str, float]:
        return {k: t.bytes for k, t in self.terms.items()}

    @property
    def fields(self) -> dict[str, str]:
        return {k: t.field for k, t in self.terms.items()}

    @property
    def events(self) -> float:
        return sum(t.events for t in self.terms.values())

    @property
    def memory_bytes(self) -> float:
        return self.base_bytes + sum(t.bytes for t in self.terms.values())

    def describe(self) -> str:
        parts = [f"{count_text(t.count)} {t.what}" for t in self.terms.values() if t.count > 0]
        return f"about {', '.join(parts)}: {count_text(self.events)} events, {self.memory_bytes / 2**20:,.0f} MiB"


def count_text(x: float) -> str:
    return f"{x:,.0f}" if x < 1e7 else f"{x:.3g}"


# ---- an engine's iteration time, and what a sidecar serves -------------------------------------------


def iteration_s(spec: RunSpec, prefill: float, batch: float, sum_ctx: float) -> float:
    """One iteration's time with `prefill` tokens, `batch` sequences and `sum_ctx` context read, from
    the engine's latency law (models.engine.laws) and host work (models.engine.batching: overlapped or
    in sequence)."""
    e = spec.engine
    chunk = 1 if prefill else 0  # (one prefill chunk, whose sequence is counted in `batch`)
    g = law_of(e.latency).step_time(prefill, chunk, prefill * (prefill + 1) / 2, 0, batch - chunk, sum_ctx)
    st = e.step
    h = e.host_s + st.host_per_seq_s * batch + st.host_per_token_s * (batch + prefill)
    f = st.front_per_request_s * (1 if prefill else 0) + st.front_per_token_s * batch
    gg, hh = compose(g, h, f, st.sequential)
    return max(gg, hh, 1e-9)


def capacity_rps(spec: RunSpec, mean_prompt: float, mean_output: float) -> float:
    """One sidecar's capacity in requests/s (models.engine.capacity), as the arrivals are drawn."""
    e = spec.engine
    cap = sidecar_capacity_rps(
        e.latency, e.max_num_seqs, e.host_s, mean_prompt, mean_output, e.max_num_batched_tokens, e.step
    )
    return cap if math.isfinite(cap) and cap > 0 else 0.0


def decode_batch(spec: RunSpec, rate: float, prompt: float, output: float) -> float:
    """A sidecar's mean batch serving `rate` requests/s of these mean lengths: B = rate x output x T(B)
    (Little's law; T linear in B), at most max_num_seqs."""
    s = spec.engine.max_num_seqs
    t1, t2 = iteration_s(spec, 0.0, 1.0, prompt + output / 2), iteration_s(spec, 0.0, 2.0, 2 * (prompt + output / 2))
    slope, base = max(t2 - t1, 0.0), max(2 * t1 - t2, 0.0)
    work = rate * output
    return min(work * base / (1.0 - work * slope), s) if work * slope < 1.0 else float(s)


def decode_iterations(spec: RunSpec, rate: float, prompt: float, output: float, duration: float) -> float:
    """Iterations a sidecar runs serving `rate` requests/s of these mean lengths for `duration` s: each
    request takes `output` iterations in a batch of B (`decode_batch`; one request at a time below 1);
    a saturated sidecar runs full batches back to back, into the drain (until the run's end)."""
    if rate <= 0 or duration <= 0:
        return 0.0
    s = spec.engine.max_num_seqs
    b, tokens = decode_batch(spec, rate, prompt, output), rate * output * duration
    if b >= s:
        return min(tokens / s, spec.end_s / iteration_s(spec, 0.0, s, s * (prompt + output / 2)))
    return tokens / max(b, 1.0)


# ---- requests ----------------------------------------------------------------------------------------


def mean_lengths(spec: RunSpec) -> tuple[float, float] | None:
    """Mean prompt and output tokens of the workload's requests, or None if it has none to say."""
    p = spec.workload.params
    trace = getattr(p, "_trace", None) if hasattr(p, "cycle_s") else None
    if trace is not None and len(trace.t):
        return float(trace.prompt.mean()), float(trace.output.mean())
    if hasattr(p, "tokens"):
        return p.tokens.prompt.clipped_mean(), p.tokens.output.clipped_mean()
    if spec.workload.closed_loop:
        return _closed_lengths(p)[:2]
    return None


def open_requests(spec: RunSpec) -> tuple[float, str]:
    """Open-loop arrivals over the horizon, fleet-wide, and the field that sets them; (0, "") if unknown."""
    p, n, h = spec.workload.params, spec.fleet.n_sidecars, spec.horizon_s
    trace = getattr(p, "_trace", None) if hasattr(p, "cycle_s") else None
    if trace is not None and getattr(p, "load", None) is None:
        t = trace.t[trace.t >= p.time_offset_s] - p.time_offset_s
        window = h * p.rate_scale
        if p.loop and len(t):
            return len(t) * window / max(p.cycle_s(), 1e-300), "workload.rate_scale"
        return float((t < window).sum()), "workload.rate_scale"
    load, lengths = getattr(p, "load", None), mean_lengths(spec)
    if load is None or lengths is None:
        return 0.0, ""
    return load * capacity_rps(spec, *lengths) * n * h, "workload.load"


def _closed_lengths(p) -> tuple[float, float, float]:
    """(mean prompt, mean output, longest output a batch waits for) of a closed loop's requests."""
    from wadiloco.models.workload.kinds import OutputLengths
    from wadiloco.models.workload.prompt_sets import PROMPT_SETS

    ps = p.prompts
    prompt = sum(PROMPT_SETS[ps].tokens) / PROMPT_SETS[ps].n_slots if isinstance(ps, str) else ps.clipped_mean()
    out = p.output_tokens
    if isinstance(out, OutputLengths):
        return prompt, out.clipped_mean(), float(out.max if out.sigma == 0 else min(out.max, 3 * out.clipped_mean()))
    if isinstance(out, list):
        return prompt, sum(out) / len(out), float(max(out))
    return prompt, float(out), float(out)


def batch_s(spec: RunSpec, c: int, prompt: float, longest: float) -> float:
    """The wall time of a batch of c requests submitted at once: their prefills in chunks of the token
    budget, then decode iterations until the longest output is done; waves of max_num_seqs."""
    e = spec.engine
    waves = math.ceil(c / e.max_num_seqs)
    b = c / waves
    tokens = b * prompt
    chunks = math.ceil(tokens / e.max_num_batched_tokens)
    pre = chunks * iteration_s(spec, tokens / chunks, b, 0.0)
    dec = max(longest - 1.0, 0.0) * iteration_s(spec, 0.0, b, b * (prompt + longest / 2))
    return waves * (pre + dec)


def closed_requests(spec: RunSpec) -> tuple[float, str]:
    """Requests a closed loop's clients create over the horizon, fleet-wide: batches of c(t) back to
    back (each its wall time plus client_gap_s), or N users each waiting for an answer and thinking."""
    from wadiloco.models.workload.kinds import ExponentialThink, SteadyConcurrency, closed_start_delay

    p = spec.workload.params
    try:
        start = closed_start_delay(p, spec.engine.start_delay_s)
    except ValueError:
        start = 0.0
    window = max(0.0, spec.horizon_s - start)
    prompt, output, longest = _closed_lengths(p)
    if p.mode == "batch":
        cc = p.concurrency
        levels = [(1.0, cc.c)] if isinstance(cc, SteadyConcurrency) else _bursty_levels(cc)
        cycles = [(frac, c, batch_s(spec, c, prompt, longest) + p.client_gap_s) for frac, c in levels]
        per = sum(frac * c * math.ceil(window / cycle) for frac, c, cycle in cycles)
        return per * spec.fleet.n_sidecars, "workload.concurrency"
    th = p.think_s
    think = th.mean_s if isinstance(th, ExponentialThink) else float(th if isinstance(th, (int, float)) else th.s)
    users, r = p.users, 0.0
    active = float(min(users, spec.engine.max_num_seqs))
    for _ in range(20):  # the response time at the users' concurrency, and the concurrency at it
        r = batch_s(spec, max(1, round(active)), prompt, output)
        active = min(users * r / (r + think), float(spec.engine.max_num_seqs)) if r + think > 0 else active
    per = users * math.ceil(window / max(r + think, 1e-9))
    return per * spec.fleet.n_sidecars, "workload.users"


def _bursty_levels(cc) -> list[tuple[float, int]]:
    busy = min(cc.window_s / cc.period_s, 1.0)
    return [(busy, cc.busy), (1.0 - busy, cc.quiet)]


def requests(spec: RunSpec) -> Term:
    n, field = closed_requests(spec) if spec.workload.closed_loop else open_requests(spec)
    return Term(n, 3.0 * n, 250.0 * n, field or "horizon_s", "requests")


# ---- training, the monitor, the fleet's parts ----------------------------------------------------


def fixed_terms(spec: RunSpec) -> dict[str, Term]:
    f, mon = spec.fleet, spec.monitor
    rounds = spec.horizon_s / spec.training.step_time_s
    samples = spec.end_s / mon.sample_s
    by_drain = spec.end_s / (2 * spec.horizon_s)
    comps = float(f.n_sidecars + f.n_hosts)
    per_sample = 1.0 + f.n_sidecars / 2 + f.islands + f.n_hosts / 10
    steps = f.islands * rounds
    long_by = "drain_s" if by_drain > 1.0 / mon.sample_s else "monitor.sample_s"  # (what makes the timeline long)
    return {
        "island_steps": Term(steps, 2.0 * steps, 60.0 * steps, "training.step_time_s", "island steps"),
        "samples": Term(samples, per_sample * samples, 250.0 * samples, long_by, "monitor samples"),
        "components": Term(comps, 50.0 * comps, 10e3 * comps, "fleet", "sidecars and hosts"),
    }


def merge_s(spec: RunSpec, frac: float = 1.0) -> float:
    """A merge's duration, roughly: staging over PCIe, the ring all-reduce over the island uplinks (and
    its fixed ring time), the outer step, the checkpoint (serialised, then written to the store)."""
    m, f = spec.merge, spec.fleet
    stage = m.stage_gbits(frac) / f.pcie_gbps
    ring = 0.0
    if f.islands > 1:
        per_host = 2 * (f.islands - 1) / f.islands * m.stage_gbits(frac)
        ring = m.ring_wait_s + per_host * f.hosts_per_island / min(f.wan_gbps, f.nic_gbps)
    outer = m.shard(frac) / m.outer_elements_per_s
    ckpt = max(m.ckpt_gbits(frac) / f.serialize_gbps, m.ckpt_gbits(frac) * f.n_hosts / f.store_gbps)  # (pipelined)
    return stage + ring + outer + (ckpt if m.checkpoint_mode == "sync" else 0.0)


def merges(spec: RunSpec) -> dict[str, Term]:
    """Merges (Streaming DiLoCo rounds of `fragments` fragments), and the scheduled instants a policy
    that ignores the corridor walks through."""
    t, m, f, pol = spec.training, spec.merge, spec.fleet, spec.policy
    steps = spec.horizon_s / t.step_time_s
    walked, most = pol.cls.schedule_work(pol.params, spec.horizon_s, t.step_time_s, pol.base_dir)
    p = m.fragments
    if p > 1:  # a round: its fragments staggered by the offset, each a merge of 1/p of the model, all of
        # them moving the whole model over the same links (so a round lasts at least a whole merge)
        frag, gap = merge_s(spec, 1.0 / p), m.fragment_offset_steps * t.step_time_s
        cycle = max(pol.h_min * t.step_time_s, (p - 1) * gap + frag, merge_s(spec))
        conc = p if gap <= 0 else min(p, 1 + math.ceil(frag / gap))
    else:
        cycle, conc = pol.h_min * t.step_time_s + merge_s(spec), 1
    n = (spec.horizon_s + (cycle - pol.h_min * t.step_time_s)) / cycle  # (one may start at the horizon's end)
    if not pol.cls.respects_corridor:  # as many as its schedule says, one per step and merge at most
        n = min(most if most is not None else steps, steps, spec.horizon_s / merge_s(spec) + 1.0)
    per = 10.0 * f.n_hosts * (1.0 + 2 * FLOW_EVENTS * conc)  # (concurrent fragments share the fabrics)
    field = "merge.fragments" if p > 1 else ("merge.h_min" if pol.cls.respects_corridor else "policy.params")
    what = "merge fragments" if p > 1 else "merges"
    out = {"merges": Term(n * p, n * p * per, 200.0 * n * p * f.n_hosts, field, what)}
    if walked:
        out["schedule"] = Term(walked, 0.1 * walked, 0.0, "policy.params", "scheduled merge instants")
    return out


def preemptions(spec: RunSpec) -> Term | None:
    """Host-core preemptions: per engine and frontend thread, one every 1/rate + wait seconds while the
    host's runnable threads (engines', frontends' and, while their island steps, learners') exceed
    its cores (models.training.host)."""
    f = spec.fleet
    if f.cores is None:
        return None
    from wadiloco.models.training.host import default_oversubscription

    law = default_oversubscription()
    paths = f.sidecars_per_host * (2 if f.frontends else 1)
    standing = f.engine_threads * f.sidecars_per_host + (f.frontend_threads * f.sidecars_per_host if f.frontends else 0)
    learners = f.learner_threads_per_gpu * f.learner_gpus_per_host

    def per_s(runnable: int) -> float:
        rate = law.rate(runnable, f.cores)
        return 1.0 / (1.0 / rate + law.wait_s) if rate > 0 else 0.0

    drain = spec.end_s - spec.horizon_s  # (the islands have stopped)
    n = f.n_hosts * paths * (per_s(standing + learners) * spec.horizon_s + per_s(standing) * drain)
    # each starts and ends a hold that slows its engine's host job to a crawl, and the fabric's timer
    # for that job's far finish stays in SimPy's queue after the hold ends (about 300 bytes)
    return Term(n, 8.0 * n, 300.0 * n, "fleet.host_cores", "host-core preemptions")


# ---- KV flows over the network fabric ------------------------------------------------------------------


def _path(f, hp: int, hd: int) -> list[tuple[str, int]]:
    """The links a flow from host hp to host hd crosses (sim.disagg kv_links): one PCIe within a host;
    NICs and the switch backplane within an island; and the two island uplinks across."""
    if hp == hd:
        return [("pcie", hp)]
    ip, i_d = hp // f.hosts_per_island, hd // f.hosts_per_island
    if ip == i_d:
        return [("out", hp), ("bp", ip), ("in", hd)]
    return [("out", hp), ("bp", ip), ("up", ip), ("down", i_d), ("bp", i_d), ("in", hd)]


def _capacity(f, link: tuple[str, int]) -> float:
    kind = link[0]
    return {"pcie": f.pcie_gbps, "out": f.nic_gbps, "in": f.nic_gbps, "bp": f.switch_gbps}.get(kind, f.wan_gbps)


def in_flight(
    spec: RunSpec, pairs: dict[tuple[int, int], float], gbits: float, sizes: np.ndarray | None = None
) -> tuple[float, float, bool]:
    """(flows in flight on average while any is, how long that is, whether a link is offered more than
    it carries) for flows of `gbits` each on average (`sizes`: their relative sizes, equally likely;
    None: all alike), `pairs[(src host, dst host)]` per second over the horizon. Each pair's flows wait
    at the most loaded link on their path, a processor-sharing queue: rho / (1 - rho) in flight below
    saturation; above it a backlog that grows for the whole horizon and drains afterwards (until the
    run's end), followed as a fluid (`backlog`)."""
    f, h = spec.fleet, spec.horizon_s
    offered: dict[tuple[str, int], float] = {}
    for (hp, hd), rate in pairs.items():
        for lk in _path(f, hp, hd):
            offered[lk] = offered.get(lk, 0.0) + rate
    binding: dict[tuple[str, int], float] = {}
    for (hp, hd), rate in pairs.items():
        lk = max(_path(f, hp, hd), key=lambda x: offered[x] * gbits / _capacity(f, x))
        binding[lk] = binding.get(lk, 0.0) + rate
    area, active, over = 0.0, h, False
    for lk, rate in binding.items():
        mu = _capacity(f, lk) / gbits  # mean-sized flows/s it carries
        rho = offered[lk] / mu
        if rho < 1.0:
            area += rate / offered[lk] * rho / (1.0 - rho) * h
            continue
        over = True
        flow_s, last = backlog(offered[lk], mu, h, spec.end_s, np.ones(1) if sizes is None else sizes)
        area += rate / offered[lk] * flow_s
        active = max(active, last)
    return area / active, active, over


def backlog(lam: float, mu: float, h: float, end: float, sizes: np.ndarray, steps: int = 400) -> tuple[float, float]:
    """(flow-seconds, the last instant a flow is in flight) of a link offered more than it carries: flows
    arrive at `lam` per second over [0, h], of relative sizes `sizes` (mean 1, equally likely), and share
    the link's `mu` mean-sized flows per second equally (processor sharing, max-min with one binding
    link), until `end`. A fluid, in `steps` steps: each arrival slot's flows have had the same service, so
    its small flows finish first while the large ones stay and the count in flight grows faster than
    (lam - mu) t. 1.04-1.07x the runs' own transfer times (tests/spec/test_runsize.py)."""
    dt = end / steps
    slots = max(1, round(h / dt))
    arrived = (np.arange(slots) + 0.5) * (h / slots)
    mass = lam * h / slots / len(sizes)  # flows per (slot, size)
    served = np.zeros(slots)  # service each slot's flows have had, in mean flow sizes
    area = last = 0.0
    for i in range(steps):
        t = (i + 0.5) * dt
        here = arrived <= t
        n = float(((served[:, None] < sizes[None, :]) & here[:, None]).sum()) * mass
        if n > 0.0:
            area += n * dt
            last = t + dt / 2
            served[here] += mu * dt / n
    return area, last


def size_classes(spec: RunSpec, k: int = 16) -> np.ndarray | None:
    """The workload's prompt lengths as `k` equally likely relative sizes (mean 1): the lognormal's
    quantiles, clipped as its samples are; None if it has no such distribution."""
    lengths = getattr(getattr(spec.workload.params, "tokens", None), "prompt", None)
    if lengths is None or lengths.sigma == 0.0:
        return None
    z = np.array([statistics.NormalDist().inv_cdf((i + 0.5) / k) for i in range(k)])
    s = np.clip(np.exp(lengths.mu + lengths.sigma * z), lengths.min, lengths.max)
    return s / s.mean()


def disagg_pairs(spec: RunSpec, rate: float) -> dict[tuple[int, int], float]:
    """Hand-offs per second per (prefill host, decode host): the fleet's `rate` dealt round-robin to the
    prefill sidecars, each to the decode sidecars of its island (all of them if it has none), evenly."""
    f, d = spec.fleet, spec.disagg
    prefill = list(d.prefill_sidecars)
    decode = [s for s in range(f.n_sidecars) if s not in set(prefill)]
    per_island = f.sidecars_per_host * f.hosts_per_island
    pairs: dict[tuple[int, int], float] = {}
    for p in prefill:
        near = [x for x in decode if x // per_island == p // per_island] or decode
        for x in near:
            key = (p // f.sidecars_per_host, x // f.sidecars_per_host)
            pairs[key] = pairs.get(key, 0.0) + rate / len(prefill) / len(near)
    return pairs


def fetch_count(spec: RunSpec, n_requests: float) -> tuple[float, float, float]:
    """(remote-KV fetches, tokens each, the chance a cache holds them). With engine.shared_prefix, a
    request that starts with a system prompt fetches it when its own sidecar's prefix cache has lost it
    (or never had it) and a peer's has it. Each cache is
    an LRU (models.engine.prefix) through which every request's prompt blocks pass; by Che's
    approximation a block requested at rate r stays cached with probability 1 - exp(-r T), where the
    cache's characteristic time T makes the expected blocks held equal to its capacity (less the
    blocks running requests pin). With a trace's block hashes: the requests whose first block an
    earlier request (most likely on another sidecar) had."""
    f, e, w = spec.fleet, spec.engine, spec.workload
    n, lengths = f.n_sidecars, mean_lengths(spec)
    if e.prefix is None or lengths is None or n < 2:
        return 0.0, 0.0, 0.0
    bt, rate = e.prefix.block_tokens, n_requests / max(spec.horizon_s, 1e-9) / n  # per sidecar
    if w.shared_prefix is not None:
        frac, k, tokens = w.shared_prefix
        shared = max(min(tokens, lengths[0]) // bt, 0.0)
        if shared < 1:
            return 0.0, 0.0, 0.0
        per_block = rate * frac / k  # each block of each system prompt
        unique = math.ceil(lengths[0] / bt) - frac * shared  # a request's blocks no other has
        pinned = decode_batch(spec, rate, *lengths) * unique  # (running requests pin theirs)
        unique *= rate
        t = _che_time(max(e.prefix.capacity - pinned, 1.0), unique, per_block, int(k * shared))
        held = -math.expm1(-per_block * t)
        peer = 1.0 - (1.0 - held) ** (n - 1)
        # and, while caches keep them, each request that needs more of a system prompt's leading blocks
        # than its sidecar has seen (a peer computed them): a record depth in the sequence of depths,
        # depth d being one with probability q_d / P(depth >= d)
        at = [_at_least(w.params, d * bt) for d in range(1, int(tokens // bt) + 2)]
        at[-1] = 0.0
        records = sum((at[d] - at[d + 1]) / at[d] for d in range(len(at) - 1) if at[d] > 0)
        seen = -math.expm1(-per_block * at[0] * spec.horizon_s)
        first = max(0.0, n * k * seen * records - k) * held
        return max(n_requests * frac * (1.0 - held) * peer, first), shared * bt, held  # (the first are misses too)
    trace = getattr(w.params, "_trace", None)
    if trace is not None and trace.hashes is not None and len(trace.t):
        firsts = [h[0] for h in trace.hashes if h]
        repeat = 1.0 - len(set(firsts)) / max(len(firsts), 1)
        return n_requests * repeat * (n - 1) / n, lengths[0] / 2, 0.5
    return 0.0, 0.0, 0.0


def _at_least(params, tokens: float) -> float:
    """The share of prompts at least `tokens` long (a synthetic kind's lognormal; else 1)."""
    pr = getattr(getattr(params, "tokens", None), "prompt", None)
    if pr is None or pr.sigma == 0:
        return 1.0 if pr is None or pr.median >= tokens else 0.0
    return 0.5 * math.erfc((math.log(tokens) - pr.mu) / (pr.sigma * math.sqrt(2.0)))


def _che_time(capacity: float, unique: float, rate: float, blocks: int) -> float:
    """T with unique x T + blocks x (1 - exp(-rate T)) = capacity (blocks seen once hold a place for T)."""
    lo, hi = 0.0, 1.0
    while unique * hi + blocks * -math.expm1(-rate * hi) < capacity and hi < 1e12:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if unique * mid + blocks * -math.expm1(-rate * mid) < capacity:
            lo = mid
        else:
            hi = mid
    return hi


def remote_pairs(spec: RunSpec, per_s: float, held: float) -> dict[tuple[int, int], float]:
    """Fetches per second per (holder host, fetching host): each sidecar's share `per_s / sidecars`
    from the nearest sidecar holding the blocks (sim.kvstore: its host, then its island, then the
    lowest index), each holding them with probability `held`: across islands that is nearly always
    the first host of the first other island, whose uplink they all share."""
    f = spec.fleet
    sph, hpi, per_island = f.sidecars_per_host, f.hosts_per_island, f.sidecars_per_host * f.hosts_per_island
    if f.n_sidecars < 2:
        return {}
    each = per_s / f.n_hosts
    host = 1.0 - (1.0 - held) ** (sph - 1)
    island = (1.0 - host) * (1.0 - (1.0 - held) ** (per_island - sph))
    pairs: dict[tuple[int, int], float] = {}
    for hd in range(f.n_hosts):
        i = hd // hpi
        first = i * hpi if hd != i * hpi else i * hpi + 1
        other = 0 if i else hpi  # the first host of the first other island
        shares = ((host, hd), (island, first), (1.0 - host - island, other if f.islands > 1 else first))
        for share, hp in shares:
            if share > 0 and 0 <= hp < f.n_hosts:
                pairs[hp, hd] = pairs.get((hp, hd), 0.0) + each * share
    return pairs


def kv_flows(spec: RunSpec, n_requests: float) -> tuple[dict[str, Term], float]:
    """Disaggregated hand-offs or remote-KV fetches, and the remote pool's lookups; and how long flows
    are in flight (the horizon, or longer behind a backlog)."""
    if spec.disagg is None and spec.remote_kv is None:
        return {}, 0.0
    lengths = mean_lengths(spec) or (0.0, 0.0)
    rate = n_requests / max(spec.horizon_s, 1e-9)
    if spec.disagg is not None:
        bpt, field, what = spec.disagg.kv_bytes_per_token, "disagg.kv_bytes_per_token", "KV hand-offs"
        flows, tokens = n_requests, lengths[0]
        pairs = disagg_pairs(spec, rate)
    else:
        bpt, field, what = spec.remote_kv.kv_bytes_per_token, "remote_kv.kv_bytes_per_token", "remote-KV fetches"
        flows, tokens, held = fetch_count(spec, n_requests)
        pairs = remote_pairs(spec, flows / max(spec.horizon_s, 1e-9), held)
    gbits = max(tokens * bpt * 8 / 1e9, 1e-12)
    sizes = size_classes(spec) if spec.disagg is not None else None  # (a fetch moves a cached prefix: alike)
    mean, active, over = in_flight(spec, pairs, gbits, sizes) if flows else (0.0, spec.horizon_s, False)
    out = {"kv_flows": Term(flows, flows * (4.0 + 2 * FLOW_EVENTS * mean), flows * 600.0 + mean * 400.0, field, what)}
    # flow-seconds (Little: the flows' durations summed); a link offered more than it carries holds a backlog
    out["kv_flow_s"] = Term(mean * active, 0.0, 0.0, field, "KV flow-seconds" + (" (a backlog grows)" if over else ""))
    if spec.remote_kv is not None:
        looks = n_requests * spec.fleet.n_sidecars
        out["lookups"] = Term(looks, LOOKUP_EVENTS * looks, 0.0, "remote_kv", "prefix-cache lookups")
    return out, active


# ---- routing, engines fed from outside, a co-tenant ------------------------------------------------


def routing(spec: RunSpec, n_requests: float) -> Term | None:
    """A routed fleet: a decision per request, each reading every sidecar's state."""
    if not spec.router.routed:
        return None
    n = spec.fleet.n_sidecars
    return Term(n_requests, n_requests * (1.0 + ROUTE_EVENTS * n), 0.0, "router.name", "routing decisions")


def fed_iterations(spec: RunSpec, n_requests: float, active: float) -> Term | None:
    """Engines fed from outside (disagg:, remote_kv:): an event per iteration of every engine, at most
    (a disaggregated fleet's decode engines run ahead to the next hand-off, prefill step or KV
    completion: sim.disagg). The decode side receives the requests as their KV arrives: over `active`
    seconds (longer than the horizon behind a backlog)."""
    if spec.disagg is None and spec.remote_kv is None:
        return None
    lengths = mean_lengths(spec)
    if lengths is None:
        return None
    prompt, output = lengths
    f, rate = spec.fleet, n_requests / max(spec.horizon_s, 1e-9)
    if spec.disagg is not None:
        n_pre = len(spec.disagg.prefill_sidecars)
        n_dec = max(f.n_sidecars - n_pre, 1)
        pre = rate * math.ceil(prompt / spec.engine.max_num_batched_tokens) * spec.horizon_s  # a prefill each
        span = max(active, spec.horizon_s)
        dec = n_dec * decode_iterations(spec, n_requests / span / n_dec, prompt, max(output - 1.0, 1.0), span)
        n, field = pre + dec, "disagg.prefill_sidecars"
    else:
        n = f.n_sidecars * decode_iterations(spec, rate / f.n_sidecars, prompt, output, spec.horizon_s)
        field = "remote_kv"
    return Term(n, n, 0.0, field, "engine iterations of engines fed from outside")


def cotenant(spec: RunSpec, n_merges: float) -> Term | None:
    """A GPU co-tenant: two switches per window of its timetable (and one window per merge for a
    `merges` timetable), each a hold started or stopped on every GPU it shares, which cuts the
    engines there."""
    plan = spec.cotenant
    if plan is None:
        return None
    w = float(len(plan.fixed_windows())) + (n_merges if plan.timetable.merge_window_s is not None else 0.0)
    return Term(w, 2.0 * w * (1.0 + 2.0 * len(plan.sidecars)), 400.0 * w, "cotenant.timetable", "co-tenant windows")


def estimate(spec: RunSpec) -> Estimate:
    """The estimate for a resolved run (models.spec.resolve)."""
    req = requests(spec)
    terms = {"requests": req, **fixed_terms(spec), **merges(spec)}
    flows, active = kv_flows(spec, req.count)
    extra = {
        "preemptions": preemptions(spec),
        "routing": routing(spec, req.count),
        "fed_iterations": fed_iterations(spec, req.count, active),
        "cotenant": cotenant(spec, terms["merges"].count),
    }
    terms.update({k: t for k, t in extra.items() if t is not None})
    terms.update(flows)
    return Estimate(terms, BASE_BYTES)
