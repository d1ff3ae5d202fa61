"""Building a fleet's parts from a run's spec (models.spec.run.RunSpec): the workload, the serving
sidecars and the policy. sim.fleet.Fleet wires them to the resources, the monitor, the
merge executor, the trainer and the lookahead bound.
"""

from __future__ import annotations

import os

import numpy as np

from wadiloco.models.engine._fast import (  # compiled with the serving core, or pure (models/engine/_fast/__init__.py)
    KVPool,
    PrefixCache,
)
from wadiloco.models.engine.capacity import sidecar_capacity_rps
from wadiloco.models.engine.prefix import shared_prefix_hashes
from wadiloco.models.policies.base import FutureView, Policy, PolicyContext
from wadiloco.models.rng import stream
from wadiloco.models.spec.run import EngineSpec, KVSpec, PolicySpec, PrefixSpec, RunSpec
from wadiloco.models.workload.kinds import Arrivals, generate_arrivals
from wadiloco.models.workload.kinds import make_clients as workload_clients
from wadiloco.sim.engine import Lookahead, Sidecar
from wadiloco.sim.resources import HostRes
from wadiloco.sim.routing import routed_inputs


def checks_on(scenario_says: bool, check: bool | None) -> bool:
    """Whether this run checks invariants: `check` if given, else the scenario's switch
    (monitor.check_invariants) or $WADILOCO_CHECK_INVARIANTS=1 (the test suite sets it for every run)."""
    if check is not None:
        return check
    env_check = os.environ.get("WADILOCO_CHECK_INVARIANTS", "").strip().lower() in ("1", "true", "yes", "on")
    return scenario_says or env_check


def kv_pool(k: KVSpec | None) -> KVPool | None:
    """A sidecar's KV-cache pool (models.engine.kv), or None: unlimited."""
    if k is None:
        return None
    kv = KVPool(k.blocks, k.block_size, k.watermark, k.reserved, k.preemption)
    kv.hold = k.hold
    if kv.hold and kv.hold >= kv.cap:
        raise ValueError(f"merge buffers ({kv.hold} blocks) leave no KV block of the pool's {k.blocks} while merging")
    return kv


def prefix_cache(p: PrefixSpec | None) -> PrefixCache | None:
    """A sidecar's prefix cache (models.engine.prefix), or None: off."""
    return PrefixCache(p.capacity, p.block_tokens) if p is not None else None


def pooled(p: PrefixSpec | None) -> bool:
    return p is not None and p.pooled


def sidecar(
    env, s: int, arrivals, e: EngineSpec, hr: HostRes, j: int, la: Lookahead, fast_forward: bool | None = None, **kw
) -> Sidecar:
    """Sidecar s, the host's j-th, on its GPU and CPU path (and frontend path, with frontend work),
    with its KV pool, swapping over the host's PCIe; fast-forward as the engine says unless given;
    `kw`: client and prefix (sim.engine.Sidecar's)."""
    return Sidecar(
        env,
        s,
        arrivals,
        e.latency,
        max_num_seqs=e.max_num_seqs,
        max_num_batched_tokens=e.max_num_batched_tokens,
        host_s=e.host_s,
        gpu=hr.gpus[j],
        host=hr.cpus[j],
        lookahead=la,
        step=e.step,
        front=hr.fronts[j] if e.step.frontend else None,
        kv=kv_pool(e.pool(s)),
        fast_forward=e.fast_forward if fast_forward is None else fast_forward,
        limits=(e.lag, e.max_len, e.patience_s, pooled(e.prefix)),
        pcie=hr.pcie,
        block_bytes=e.block_bytes,
        **kw,
    )


def merge_memory(sidecars: list[Sidecar]):
    """The merge executor's `on_active` with engine.merge_memory `merge`: when a merge starts or ends,
    the sidecars holding merge buffers lose or regain those blocks, and each engine is woken (a run in
    flight is cut there, so fast-forward and per-iteration stepping see the pool change at the same
    iteration, its next: models.engine.kv apply_hold). None without such sidecars."""
    held = [s for s in sidecars if s.core.kv is not None and s.core.kv.hold]
    if not held:
        return None

    def flip(merging: bool) -> None:
        for s in held:
            s.core.kv.holding = merging
            s.wake()

    return flip


def make_clients(spec: RunSpec, seed: int) -> list | None:
    """Each sidecar's closed-loop client (models.workload.clients), None for open-loop workloads. Its start
    delay may come from the engine profile (workload.start_delay_s: profile, or omitted)."""
    w = spec.workload
    if not w.closed_loop:
        return None
    return workload_clients(
        w.params,
        n_sidecars=w.n_sidecars,
        horizon_s=w.horizon_s,
        seed=seed,
        profile_start_delay_s=spec.engine.start_delay_s,
    )


ARRIVALS_CACHE_SIZE = 4  # a sweep worker's recent (workload, fleet, seed)s: a seed's draws come together
_ARRIVALS: dict[tuple, tuple[list[Arrivals], float | None, object]] = {}


def make_arrivals(
    spec: RunSpec, seed: int, injected: list[Arrivals] | None = None
) -> tuple[list[Arrivals], float | None]:
    """(every sidecar's arrivals, one sidecar's capacity in requests/s or None if the workload
    never asked). Common random numbers: they depend on the seed and the scenario only, so the
    last few are kept (read-only arrays) by what they are made from, and every policy and draw
    run on a seed in this process shares one draw. Injected arrivals (metamorphic tests) still
    come with the scenario's own capacity figure, which a deployed controller would know from
    configuration, not from the arrivals."""
    if injected is not None:
        return injected, _generate(spec, seed, False)[1]
    trace = getattr(spec.workload.params, "_trace", None)  # a loaded trace: by identity (the entry keeps it alive)
    key = arrivals_key(spec, seed, id(trace))
    hit = _ARRIVALS.pop(key, None)
    if hit is None:
        hit = (*_generate(spec, seed, True), trace)
        while len(_ARRIVALS) >= ARRIVALS_CACHE_SIZE:
            del _ARRIVALS[next(iter(_ARRIVALS))]
    _ARRIVALS[key] = hit  # the most recent last
    return list(hit[0]), hit[1]


def arrivals_key(spec: RunSpec, seed: int, trace_id: int) -> tuple:
    """Everything the arrivals are made from: the workload's params, the fleet's size, horizon and
    folder, the seed, and what one sidecar's capacity is computed from."""
    w, e = spec.workload, spec.engine
    fleet = (w.n_sidecars, float(w.horizon_s), w.base_dir, w.source)
    engine = (e.latency, float(e.host_s), e.max_num_seqs, e.max_num_batched_tokens, e.step, w.shared_prefix)
    return (type(w.params), w.params.model_dump_json(), trace_id, int(seed), fleet, engine)


def _generate(spec: RunSpec, seed: int, prefix: bool) -> tuple[list[Arrivals], float | None]:
    """make_arrivals' draw itself, with engine.shared_prefix's block hashes if `prefix`."""
    w, e = spec.workload, spec.engine
    seen_caps: list[float] = []

    def capacity(mean_prompt: float, mean_output: float) -> float:
        cap = sidecar_capacity_rps(
            e.latency, e.max_num_seqs, e.host_s, mean_prompt, mean_output, e.max_num_batched_tokens, e.step
        )
        seen_caps.append(cap)
        return cap

    generated = generate_arrivals(
        w.params,
        n_sidecars=w.n_sidecars,
        horizon_s=w.horizon_s,
        capacity_rps=capacity,
        seed=seed,
        base_dir=w.base_dir,
        file=w.source,
    )
    if prefix and w.shared_prefix is not None:
        generated = with_shared_prefix(generated, w.shared_prefix, seed)
    return generated, (seen_caps[-1] if seen_caps else None)


def with_shared_prefix(arrivals: list[Arrivals], sp: tuple[float, int, int], seed: int) -> list[Arrivals]:
    """Synthetic arrivals with block hashes from engine.shared_prefix (models.engine.prefix: a `fraction`
    of requests start with one of `prompts` system prompts of `tokens` tokens), each sidecar's from its
    own stream; arrivals that carry hashes (a trace's) keep theirs."""
    fraction, prompts, tokens = sp
    return [
        a
        if a.hashes is not None
        else Arrivals(
            a.t,
            a.prompt,
            a.output,
            shared_prefix_hashes(a.prompt, s, stream(seed, "prefix", s), fraction, prompts, tokens),
        )
        for s, a in enumerate(arrivals)
    ]


def make_sidecars(
    env, spec: RunSpec, arrivals: list[Arrivals], hosts: list[HostRes], la: Lookahead, clients: list | None = None
) -> list[Sidecar]:
    """One engine per sidecar, on its host's GPU and CPU path; `la` bounds how far it runs ahead;
    with `clients` (closed loop), each engine serves its client's requests; with a router
    (sim.routing), none starts with arrivals: the router hands them over."""
    per_host, e = spec.fleet.sidecars_per_host, spec.engine
    arrivals = routed_inputs(spec.router, arrivals)
    return [
        sidecar(
            env,
            s,
            arrivals[s],
            e,
            hosts[s // per_host],
            s % per_host,
            la,
            client=clients[s] if clients is not None else None,
            prefix=prefix_cache(e.prefix),
        )
        for s in range(spec.fleet.n_sidecars)
    ]


def make_policy(
    p: PolicySpec,
    seed: int,
    draw: int,
    ref_merges: int | None,
    ref_steps: int | None,
    arrivals: list[Arrivals],
    simulate=None,
) -> Policy:
    """The run's policy on its own RNG stream; only an oracle is shown the whole arrival schedule
    and handed `simulate` (the fleet's what-if: the same run with merges at given steps)."""
    rng = stream(seed, "policy", p.name, draw)
    ctx = PolicyContext(p.h_min, p.h_max, seed, draw, ref_merges, ref_steps, rng, p.base_dir)
    policy = p.cls(p.params, ctx)
    if p.cls.oracle:
        times = np.sort(np.concatenate([a.t for a in arrivals])) if arrivals else np.empty(0)
        policy.prepare(FutureView(times, p.horizon_s, p.step_time_s, p.n_sidecars, simulate))
    return policy
