"""Building a fleet's parts from a resolved scenario (models.spec.load.Resolved): the workload, the
serving sidecars and the policy. sim.fleet.Fleet wires them to the resources, the monitor, the
merge executor, the trainer and the lookahead bound.
"""

from __future__ import annotations

import math
import os

import numpy as np

from wadiloco.models.cotenant import resolve_profile
from wadiloco.models.engine._fast import (  # compiled with the serving core, or pure (models/engine/_fast/__init__.py)
    KVPool,
    PrefixCache,
)
from wadiloco.models.engine.batching import EngineStep
from wadiloco.models.engine.capacity import sidecar_capacity_rps
from wadiloco.models.engine.kv import bytes_per_token, pool_blocks
from wadiloco.models.engine.latency import LatencyModel, default_latency
from wadiloco.models.engine.prefix import MOONCAKE_BLOCK_TOKENS, shared_prefix_hashes
from wadiloco.models.engine.profiles import ModelFit, model_fit
from wadiloco.models.policies.base import FutureView, Policy, PolicyContext
from wadiloco.models.rng import stream
from wadiloco.models.spec.load import Resolved
from wadiloco.models.spec.scenario import Scenario
from wadiloco.models.training.interference import InterferenceWeights
from wadiloco.models.workload.clients import BatchLoop
from wadiloco.models.workload.kinds import WORKLOADS, Arrivals, generate_arrivals
from wadiloco.models.workload.kinds import make_clients as workload_clients
from wadiloco.sim.engine import Lookahead, Sidecar
from wadiloco.sim.resources import HostRes
from wadiloco.sim.routing import routed_inputs


def checks_on(sc: Scenario, check: bool | None) -> bool:
    """Whether this run checks invariants: `check` if given, else the scenario's switch or
    $WADILOCO_CHECK_INVARIANTS=1 (the test suite sets it for every run)."""
    if check is not None:
        return check
    env_check = os.environ.get("WADILOCO_CHECK_INVARIANTS", "").strip().lower() in ("1", "true", "yes", "on")
    return sc.monitor.check_invariants or env_check


def engine_host_s(sc: Scenario, w: InterferenceWeights) -> float:
    """CPU time per iteration: the scheduler overhead, plus kernel launches when not using graphs;
    none under an engine profile's model (its fitted law is the whole iteration: GPU-bound twin)."""
    if sc.engine.model is not None:
        return 0.0
    return sc.engine.host_overhead_s + (0.0 if sc.engine.cuda_graphs else w.eager_host_s)


def engine_step(sc: Scenario) -> EngineStep:
    """The engine generation and its host work beyond the fixed part (models.engine.batching.EngineStep)."""
    e = sc.engine
    return EngineStep(
        sequential=e.step == "sequential",
        host_per_seq_s=e.host_per_seq_s,
        host_per_token_s=e.host_per_token_s,
        front_per_request_s=e.frontend_per_request_s,
        front_per_token_s=e.frontend_per_token_s,
    )


def engine_kv(sc: Scenario, s: int) -> KVPool | None:
    """Sidecar s's KV-cache pool (models.engine.kv), or None: unlimited (no pool given, or fleet.unlimited
    names kv). Under same_gpu with merge_memory `always`, the sidecar that runs its host's outer
    step (the host's first GPU, as sim.merge does) keeps the merge buffers out of its pool."""
    e = sc.engine
    if (e.kv_blocks is None and e.gpu_memory_gb is None) or "kv" in sc.fleet.unlimited:
        return None
    block_bytes = kv_block_bytes(sc)
    if e.kv_blocks is not None:
        pool = e.kv_blocks
    else:
        gb = 1e9
        pool = pool_blocks(
            e.gpu_memory_gb * gb, e.gpu_memory_utilization, e.weights_gb * gb, e.activation_gb * gb, block_bytes
        )
    reserved = hold = 0
    px = engine_prefix(sc)
    if px is not None:  # the prefix cache's blocks live in the pool, held once whoever uses them
        reserved += math.ceil(px.capacity * px.block_tokens / e.kv_block_size)
    if e.merge_memory != "none" and sc.fleet.colocation == "same_gpu" and s % sc.fleet.sidecars_per_host == 0:
        m = sc.merge
        shard = sc.training.params / sc.fleet.hosts_per_island
        hold = math.ceil(shard * (m.pseudo_grad_bytes_per_param + m.checkpoint_bytes_per_param) / block_bytes)
    kv = KVPool(
        pool, e.kv_block_size, e.kv_watermark, reserved + (hold if e.merge_memory == "always" else 0), e.preemption
    )
    kv.hold = hold if e.merge_memory == "merge" else 0
    if kv.hold and kv.hold >= kv.cap:
        raise ValueError(f"merge buffers ({kv.hold} blocks) leave no KV block of the pool's {pool} while merging")
    return kv


def merge_memory_hook(sidecars: list[Sidecar], merging, changed):
    """The merge executor's bound_changed with engine.merge_memory `merge`: when a merge starts or
    ends (`merging()` flips), the sidecars holding merge buffers lose or regain those blocks, and each
    engine is woken (a run in flight is cut there, so fast-forward and per-iteration stepping see the
    pool change at the same iteration, its next: models.engine.kv apply_hold); then `changed`. Without
    such sidecars, `changed` itself."""
    held = [s for s in sidecars if s.core.kv is not None and s.core.kv.hold]
    if not held:
        return changed
    state = [False]

    def hook() -> None:
        now = merging()
        if now != state[0]:
            state[0] = now
            for s in held:
                s.core.kv.holding = now
                s.wake()
        changed()

    return hook


def kv_block_bytes(sc: Scenario) -> int:
    """Bytes of one KV block of the model shape (what a swap copies per block)."""
    e = sc.engine
    return e.kv_block_size * bytes_per_token(e.model_layers, e.model_kv_heads, e.model_head_dim, e.kv_dtype_bytes)


def engine_prefix(sc: Scenario) -> PrefixCache | None:
    """A sidecar's prefix cache (models.engine.prefix) of engine.prefix_cache tokens in whole 512-token blocks,
    or None (off: no field, or fewer tokens than a block)."""
    tokens = sc.engine.prefix_cache
    if not tokens or tokens < MOONCAKE_BLOCK_TOKENS:
        return None
    return PrefixCache(tokens // MOONCAKE_BLOCK_TOKENS, MOONCAKE_BLOCK_TOKENS)


def prefix_summary(sidecars: list[Sidecar]) -> dict:
    """prefix_hit_rate (only with a prefix cache): prompt tokens served from the caches over prompt
    tokens, at the requests' first admissions, fleet-wide."""
    caches = [s.core.px for s in sidecars if s.core.px is not None]
    if not caches:
        return {}
    prompt = sum(c.prompt_tokens for c in caches)
    return {"prefix_hit_rate": sum(c.hit_tokens for c in caches) / prompt if prompt else 0.0}


def kv_summary(sidecars: list[Sidecar]) -> dict:
    """The run's KV-cache figures (none without pools): preemptions and requests rejected as too long
    (summed), the peak usage (the fullest pool after an iteration's allocations) and the mean usage
    (blocks in use over blocks available, summed over every engine's iterations)."""
    pools = [s.core.kv for s in sidecars if s.core.kv is not None]
    if not pools:
        return {}
    cap = sum(p.sum_cap for p in pools)
    swap = {"swap_blocks": sum(p.copied for p in pools)} if any(p.swap for p in pools) else {}
    return {
        **swap,
        "preemptions": sum(p.preemptions for p in pools),
        "rejected_too_long": sum(p.rejected for p in pools),
        "kv_usage_peak": max(p.peak for p in pools),
        "kv_usage_mean": sum(p.sum_used for p in pools) / cap if cap else 0.0,
    }


def profile_model(sc: Scenario) -> ModelFit | None:
    """The engine profile's fit of `engine.model` (models.engine.profiles), or None without one."""
    e = sc.engine
    if e.model is None:
        return None
    return model_fit(str(resolve_profile(e.profile, sc.base_dir, sc.source)), e.model)


def engine_latency(sc: Scenario, given: LatencyModel | None) -> LatencyModel:
    """The engine's iteration law: `given` (tests), the profile model's a + d*batch, or the H200 fit in
    the form engine.latency names (models.engine.latency)."""
    if given is not None:
        return given
    fit = profile_model(sc)
    return fit.latency() if fit is not None else default_latency(sc.engine.latency)


def make_clients(r: Resolved, seed: int) -> list | None:
    """Each sidecar's closed-loop client (models.workload.clients), None for open-loop workloads. Its start
    delay may come from the engine profile (workload.start_delay_s: profile, or omitted)."""
    sc = r.scenario
    if WORKLOADS[r.workload.kind].clients is None:
        return None
    fit = profile_model(sc)
    return workload_clients(
        r.workload,
        n_sidecars=sc.fleet.n_sidecars,
        horizon_s=sc.horizon_s,
        seed=seed,
        profile_start_delay_s=fit.start_delay_s if fit is not None else None,
    )


ARRIVALS_CACHE_SIZE = 4  # a sweep worker's recent (workload, fleet, seed)s: a seed's draws come together
_ARRIVALS: dict[tuple, tuple[list[Arrivals], float | None, object]] = {}


def make_arrivals(
    r: Resolved, seed: int, lat: LatencyModel, host_s: float, injected: list[Arrivals] | None = None
) -> tuple[list[Arrivals], float | None]:
    """(every sidecar's arrivals, one sidecar's capacity in requests/s or None if the workload
    never asked). Common random numbers: they depend on the seed and the scenario only, so the
    last few are kept (read-only arrays) by what they are made from, and every policy and draw
    run on a seed in this process shares one draw. Injected arrivals (metamorphic tests) still
    come with the scenario's own capacity figure, which a deployed controller would know from
    configuration, not from the arrivals."""
    if injected is not None:
        return injected, _generate(r, seed, lat, host_s, False)[1]
    trace = getattr(r.workload, "_trace", None)  # a loaded trace: by identity (the entry keeps it alive)
    key = arrivals_key(r, seed, lat, host_s, id(trace))
    hit = _ARRIVALS.pop(key, None)
    if hit is None:
        hit = (*_generate(r, seed, lat, host_s, True), trace)
        while len(_ARRIVALS) >= ARRIVALS_CACHE_SIZE:
            del _ARRIVALS[next(iter(_ARRIVALS))]
    _ARRIVALS[key] = hit  # the most recent last
    return list(hit[0]), hit[1]


def arrivals_key(r: Resolved, seed: int, lat: LatencyModel, host_s: float, trace_id: int) -> tuple:
    """Everything the arrivals are made from: the workload's params, the fleet's size, horizon and
    folder, the seed, and what one sidecar's capacity is computed from."""
    sc, e = r.scenario, r.scenario.engine
    sp = e.shared_prefix.model_dump_json() if e.shared_prefix is not None else None
    fleet = (sc.fleet.n_sidecars, float(sc.horizon_s), sc.base_dir, sc.source)
    engine = (lat, float(host_s), e.max_num_seqs, e.max_num_batched_tokens, engine_step(sc), sp)
    return (type(r.workload), r.workload.model_dump_json(), trace_id, int(seed), fleet, engine)


def _generate(
    r: Resolved, seed: int, lat: LatencyModel, host_s: float, prefix: bool
) -> tuple[list[Arrivals], float | None]:
    """make_arrivals' draw itself, with engine.shared_prefix's block hashes if `prefix`."""
    sc = r.scenario
    seen_caps: list[float] = []

    def capacity(mean_prompt: float, mean_output: float) -> float:
        e = sc.engine
        cap = sidecar_capacity_rps(
            lat, e.max_num_seqs, host_s, mean_prompt, mean_output, e.max_num_batched_tokens, engine_step(sc)
        )
        seen_caps.append(cap)
        return cap

    generated = generate_arrivals(
        r.workload,
        n_sidecars=sc.fleet.n_sidecars,
        horizon_s=sc.horizon_s,
        capacity_rps=capacity,
        seed=seed,
        base_dir=sc.base_dir,
        file=sc.source,
    )
    if prefix and sc.engine.shared_prefix is not None:
        generated = with_shared_prefix(generated, sc, seed)
    return generated, (seen_caps[-1] if seen_caps else None)


def with_shared_prefix(arrivals: list[Arrivals], sc: Scenario, seed: int) -> list[Arrivals]:
    """Synthetic arrivals with block hashes from engine.shared_prefix (models.engine.prefix), each sidecar's
    from its own stream; arrivals that carry hashes (a trace's) keep theirs."""
    sp = sc.engine.shared_prefix
    return [
        a
        if a.hashes is not None
        else Arrivals(
            a.t,
            a.prompt,
            a.output,
            shared_prefix_hashes(a.prompt, s, stream(seed, "prefix", s), sp.fraction, sp.prompts, sp.tokens),
        )
        for s, a in enumerate(arrivals)
    ]


def client_column(client) -> str:
    """The request-table column a closed loop's tags go to."""
    return "batch" if isinstance(client, BatchLoop) else "user"


def check_clients(req: dict[str, np.ndarray], clients: list) -> None:
    """Each sidecar's closed-loop invariants (models.workload.clients) on its rows of the request table."""
    for s, client in enumerate(clients):
        mine = req["sidecar"] == s
        client.check(req["arrival"][mine], req["finish"][mine], req[client_column(client)][mine])


def make_sidecars(
    env,
    sc: Scenario,
    arrivals: list[Arrivals],
    lat: LatencyModel,
    host_s: float,
    hosts: list[HostRes],
    la: Lookahead,
    clients: list | None = None,
) -> list[Sidecar]:
    """One engine per sidecar, on its host's GPU and CPU path; `la` bounds how far it runs ahead;
    with `clients` (closed loop), each engine serves its client's requests; with a router
    (sim.routing), none starts with arrivals: the router hands them over."""
    per_host, step = sc.fleet.sidecars_per_host, engine_step(sc)
    arrivals = routed_inputs(sc, arrivals)
    return [
        Sidecar(
            env,
            s,
            arrivals[s],
            lat,
            max_num_seqs=sc.engine.max_num_seqs,
            max_num_batched_tokens=sc.engine.max_num_batched_tokens,
            host_s=host_s,
            gpu=hosts[s // per_host].gpus[s % per_host],
            host=hosts[s // per_host].cpus[s % per_host],
            fast_forward=sc.engine.fast_forward,
            lookahead=la,
            step=step,
            front=hosts[s // per_host].fronts[s % per_host] if step.frontend else None,
            client=clients[s] if clients is not None else None,
            kv=engine_kv(sc, s),
            prefix=engine_prefix(sc),
            pcie=hosts[s // per_host].pcie,
            block_bytes=kv_block_bytes(sc),
        )
        for s in range(sc.fleet.n_sidecars)
    ]


def make_policy(
    r: Resolved,
    seed: int,
    draw: int,
    ref_merges: int | None,
    ref_steps: int | None,
    arrivals: list[Arrivals],
    simulate=None,
) -> Policy:
    """The run's policy on its own RNG stream; only an oracle is shown the whole arrival schedule
    and handed `simulate` (the fleet's what-if: the same run with merges at given steps)."""
    sc = r.scenario
    rng = stream(seed, "policy", r.policy_name, draw)
    ctx = PolicyContext(sc.merge.h_min, sc.merge.h_max, seed, draw, ref_merges, ref_steps, rng, sc.base_dir)
    policy = r.policy(r.params, ctx)
    if r.policy.oracle:
        times = np.sort(np.concatenate([a.t for a in arrivals])) if arrivals else np.empty(0)
        policy.prepare(FutureView(times, sc.horizon_s, sc.training.step_time_s, sc.fleet.n_sidecars, simulate))
    return policy
