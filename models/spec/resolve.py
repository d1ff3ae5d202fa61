"""Resolving a scenario: the one place its raw fields become a run's numbers (models.spec.run.RunSpec).

A `Scenario` that passed validation (models.spec.load: the schema and the registries, cheap, no fit)
is resolved here once per run: the workload's params parsed (a trace loaded, once per process and
file), the policy checked against the merge corridor, the engine profile fitted (once per file
content: models.engine.profiles), the latency law, host time per iteration, engine step, KV pool and
prefix cache sizes, the interference weights, merge phase sizes and bandwidths, link capacities, the
co-tenant's timetable and the blocks a plug-in resolves (the testbed's labels). What a combination
of fields rules out (a router in front of a closed loop, disaggregated serving with a prefix cache,
...) is an input error here, naming the field.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from wadiloco.models.cotenant import CotenantPlan, cotenant_plan
from wadiloco.models.engine.batching import EngineStep
from wadiloco.models.engine.kv import bytes_per_token
from wadiloco.models.engine.latency import default_latency, table_file, table_law
from wadiloco.models.engine.laws import LatencyLaw
from wadiloco.models.engine.profiles import ModelFit, Profile, load_profile, resolve_profile
from wadiloco.models.network.collective import link_efficiency, ring_latency_s
from wadiloco.models.results.blocks import RESULT_BLOCKS
from wadiloco.models.spec.buildcheck import (
    block_bytes,
    check_combinations,
    kv_sizes,
    prefix_blocks,
    router,
)
from wadiloco.models.spec.files import named_by
from wadiloco.models.spec.load import check_policy_in, checked, plugin_blocks, policy_choice, scenario_from_dict
from wadiloco.models.spec.run import (
    EngineSpec,
    FleetSpec,
    HandoffSpec,
    KVSpec,
    MergeSpec,
    MonitorSpec,
    PolicySpec,
    PrefixSpec,
    RouterSpec,
    RunSpec,
    SLOSpec,
    TrainingSpec,
    WorkloadSpec,
)
from wadiloco.models.spec.scenario import Scenario
from wadiloco.models.spec.schema import read_yaml
from wadiloco.models.training.interference import InterferenceWeights, default_weights
from wadiloco.models.workload.kinds import WORKLOADS, parse_workload

INF = math.inf
# Bytes per parameter of a compressed pseudo-gradient (merge.compression): int8 as INTELLECT-1's
# all-reduce (arXiv 2412.01152), 4 bits as Streaming DiLoCo's outer updates (arXiv 2501.18512);
# per-block scales (2 bytes per 128+ values) are left out.
COMPRESSED_BYTES = {"none": 0.0, "int8": 1.0, "int4": 0.5}


def resolve(
    sc: Scenario | RunSpec, policy: str | None = None, params: dict | None = None, *, file=None, where="policy"
) -> RunSpec:
    """`sc` ready to run with `policy` (default: its own; see models.spec.load.policy_choice). A
    `RunSpec` comes back as it is when no policy is named, else with only the policy re-checked."""
    if isinstance(sc, RunSpec):
        return sc if policy is None and params is None else sc.with_policy(policy, params, file, where)
    file = sc.source if file is None else file
    workload = checked(sc)[0] or parse_workload(sc.workload, file, sc.base_dir)
    profile = _profile(sc, file)
    pol = _policy(sc, policy, params, file, where)
    check_combinations(sc, WORKLOADS[workload.kind].clients is not None, file)
    w = interference_weights(sc)
    engine = engine_spec(sc, w, profile.model(sc.engine.model, file) if profile and sc.engine.model else None, file)
    entry = sc.cotenant.profile_entry if sc.cotenant is not None else None
    return RunSpec(
        name=sc.name,
        digest=sc.digest(),
        source=sc.source,
        horizon_s=sc.horizon_s,
        drain_s=sc.drain_s,
        fleet=fleet_spec(sc),
        engine=engine,
        merge=merge_spec(sc, w),
        training=training_spec(sc),
        monitor=monitor_spec(sc),
        slo=SLOSpec(sc.slo.ttft_s, sc.slo.tpot_s, sc.slo.e2e_s),
        workload=workload_spec(sc, workload),
        policy=pol,
        router=router_spec(sc, file),
        disagg=_handoff(sc.disagg, engine, tuple(sorted(sc.disagg.prefill_sidecars)) if sc.disagg else ()),
        remote_kv=_handoff(sc.remote_kv, engine, ()),
        cotenant=_cotenant(sc, file, profile.cotenant(entry, file) if profile and entry else None),
        extras=_extras(sc, file),
    )


def from_dict(data: Any, file: object = "<scenario>", base_dir: str | Path = ".") -> RunSpec:
    """Parsed YAML to a run's spec; relative paths resolve from `base_dir`."""
    return resolve(scenario_from_dict(data, file, base_dir), file=file)


def load(path: str | Path) -> RunSpec:
    p = Path(path)
    return from_dict(read_yaml(p), p, p.parent)


def _policy(sc: Scenario, policy: str | None, params: dict | None, file: object, where: str) -> PolicySpec:
    """The run's policy in its context: the corridor, the folder its params' files are in, and what an
    oracle's view of the future needs. The scenario's own, as validation checked it, is not checked again."""
    name, raw = policy_choice(sc, policy, params)
    own = (sc.policy.name, sc.policy.params)
    m = sc.merge
    done = checked(sc)[1] if (name, raw) == own else None
    cls, p = done or check_policy_in(name, raw, m.h_min, m.h_max, sc.base_dir, file, where)
    context = (m.h_min, m.h_max, sc.base_dir, sc.horizon_s, sc.training.step_time_s, sc.fleet.n_sidecars)
    return PolicySpec(cls, p, *context, own)


# ---- the parts --------------------------------------------------------------------------------------


def _profile(sc: Scenario, file: object) -> Profile | None:
    """The engine profile, fitted (models.engine.profiles: cached per file content), or None."""
    if sc.engine.profile is None:
        return None
    with named_by(file, "engine.profile"):  # a fit the profile's own terms break names them and the file
        return load_profile(resolve_profile(sc.engine.profile, sc.base_dir, file))


def interference_weights(sc: Scenario) -> InterferenceWeights:
    """The calibrated weights (models.training.interference), with any `interference:` sets in their place."""
    w = default_weights()
    o = sc.interference
    return InterferenceWeights(
        gpu_outer=w.gpu_outer if o.gpu_outer_weight is None else o.gpu_outer_weight,
        gpu_stage=w.gpu_stage if o.gpu_stage_weight is None else o.gpu_stage_weight,
        host_ckpt=w.host_ckpt if o.host_ckpt_weight is None else o.host_ckpt_weight,
        host_stage=w.host_stage if o.host_stage_weight is None else o.host_stage_weight,
        eager_host_s=w.eager_host_s,
        graph_gpu_s=w.graph_gpu_s,
        gpu_inner=w.gpu_inner if o.gpu_inner_weight is None else o.gpu_inner_weight,
    )


def fleet_spec(sc: Scenario) -> FleetSpec:
    fc, m, e = sc.fleet, sc.merge, sc.engine
    unl = set(fc.unlimited)

    def cap(name: str, value: float) -> float:
        return INF if name in unl else value

    return FleetSpec(
        islands=fc.islands,
        hosts_per_island=fc.hosts_per_island,
        sidecars_per_host=fc.sidecars_per_host,
        learner_gpus_per_host=fc.learner_gpus_per_host,
        same_gpu=fc.colocation == "same_gpu",
        gpu_sharing=fc.gpu_sharing,
        mps_training_share=fc.mps_training_share,
        host_cores=fc.host_cores,
        cores=None if fc.host_cores is None or "host" in unl else fc.host_cores,
        engine_threads=fc.engine_threads,
        frontend_threads=fc.frontend_threads,
        learner_threads_per_gpu=fc.learner_threads_per_gpu,
        frontends=e.frontend_per_request_s > 0 or e.frontend_per_token_s > 0,
        gpu_capacity=cap("gpu", 1.0),
        cpu_capacity=cap("host", 1.0),
        pcie_gbps=cap("pcie", m.pcie_gbps),
        nic_gbps=cap("nic", fc.nic_gbps),
        switch_gbps=cap("links", fc.switch_gbps),
        wan_gbps=cap("links", fc.interisland_gbps * link_efficiency(fc.wan_efficiency, fc.interisland_gbps)),
        store_gbps=cap("storage", m.checkpoint_gbps),
        checkpoint_store=m.checkpoint_store,
        island_store_gbps=cap("storage", m.island_store_gbps),
        serialize_gbps=cap("storage", m.serialize_gbps * m.serialize_threads),
    )


def engine_spec(sc: Scenario, w: InterferenceWeights, fit: ModelFit | None, file: object = None) -> EngineSpec:
    e = sc.engine
    bb = block_bytes(sc)
    prefix = prefix_spec(sc)
    kv, holder = kv_specs(sc, bb, file)
    return EngineSpec(
        latency=latency_law(sc, fit),
        host_s=host_s(sc, w),
        step=EngineStep(
            sequential=e.step == "sequential",
            host_per_seq_s=e.host_per_seq_s,
            host_per_token_s=e.host_per_token_s,
            front_per_request_s=e.frontend_per_request_s,
            front_per_token_s=e.frontend_per_token_s,
        ),
        max_num_seqs=e.max_num_seqs,
        max_num_batched_tokens=e.max_num_batched_tokens,
        fast_forward=e.fast_forward,
        kv=kv,
        kv_holder=holder,
        kv_hold_every=sc.fleet.sidecars_per_host if holder is not kv else 0,
        prefix=prefix,
        block_bytes=bb,
        kv_bytes_per_token=bytes_per_token(e.model_layers, e.model_kv_heads, e.model_head_dim, e.kv_dtype_bytes),
        start_delay_s=fit.start_delay_s if fit is not None else None,
    )


def latency_law(sc: Scenario, fit: ModelFit | None) -> LatencyLaw:
    """The GPU step's law (models.engine.laws): an engine profile's model's fit, the measured table
    (engine.latency_table, or the H200 rows), or the linear or attention fit of the H200 rows."""
    if fit is not None:
        return fit.latency().law()
    if sc.engine.latency == "table":
        return table_law(table_file(sc.engine.latency_table, sc.base_dir, sc.source))
    return default_latency(sc.engine.latency).law()


def host_s(sc: Scenario, w: InterferenceWeights) -> float:
    """CPU time per iteration: the scheduler overhead, plus kernel launches when not using graphs;
    none under an engine profile's model (its fitted law is the whole iteration: GPU-bound twin)."""
    if sc.engine.model is not None:
        return 0.0
    return sc.engine.host_overhead_s + (0.0 if sc.engine.cuda_graphs else w.eager_host_s)


def prefix_spec(sc: Scenario) -> PrefixSpec | None:
    """A sidecar's prefix cache of engine.prefix_cache tokens in whole 512-token blocks, or None (off:
    no field, or fewer tokens than a block)."""
    px = prefix_blocks(sc)
    return PrefixSpec(*px) if px else None


def kv_specs(sc: Scenario, bb: int, file: object = None) -> tuple[KVSpec | None, KVSpec | None]:
    """(a sidecar's KV pool, that of a sidecar holding its host's merge buffers), None: unlimited (no
    pool given, or fleet.unlimited names kv). Under same_gpu with merge_memory set, the sidecar that
    runs its host's outer step (the host's first GPU, as sim.merge does) keeps the merge buffers out
    of its pool: always, or while a merge runs (`hold`). Without such sidecars both are the same.
    The sizes, and the refusal of a pool that cannot exist, are models.spec.buildcheck's."""
    e = sc.engine
    k = kv_sizes(sc, bb, sc.source if file is None else file)
    if k is None:
        return None, None
    kv = KVSpec(k.pool, e.kv_block_size, e.kv_watermark, k.reserved, 0, e.preemption)
    if k.hold is None:
        return kv, kv
    if k.always:
        return kv, KVSpec(k.pool, e.kv_block_size, e.kv_watermark, k.reserved + k.hold, 0, e.preemption)
    return kv, KVSpec(k.pool, e.kv_block_size, e.kv_watermark, k.reserved, k.hold, e.preemption)


def merge_spec(sc: Scenario, w: InterferenceWeights) -> MergeSpec:
    m = sc.merge
    return MergeSpec(
        phases=tuple(m.phases),
        weights=w,
        shard_params=sc.training.params / sc.fleet.hosts_per_island,
        pseudo_grad_bytes_per_param=m.pseudo_grad_bytes_per_param,
        checkpoint_bytes_per_param=m.checkpoint_bytes_per_param,
        outer_elements_per_s=m.outer_elements_per_s,
        checkpoint_mode=m.checkpoint_mode,
        checkpoint_stagger=m.checkpoint_stagger,
        serialize_threads=m.serialize_threads,
        fragments=m.fragments,
        fragment_offset_steps=m.fragment_offset_steps
        if m.fragment_offset_steps is not None
        else m.h_min // m.fragments,
        compression=m.compression,
        compressed_bytes_per_param=COMPRESSED_BYTES[m.compression],
        compression_on=m.compression_on,
        compress_gpu_elements_per_s=m.compress_gpu_elements_per_s,
        compress_host_elements_per_s=m.compress_host_elements_per_s,
        ring_wait_s=ring_latency_s(sc.fleet.islands, m.allreduce_calls, m.ring_step_latency_s)
        if sc.fleet.islands > 1
        else 0.0,
        allreduce_setup_s=m.allreduce_setup_s,
    )


def training_spec(sc: Scenario) -> TrainingSpec:
    t = sc.training
    return TrainingSpec(
        islands=sc.fleet.islands,
        params=t.params,
        tokens_per_step=t.tokens_per_step,
        initial_loss_tokens=t.initial_loss_tokens,
        step_time_s=t.step_time_s,
        step_jitter=t.step_jitter,
        horizon_s=sc.horizon_s,
        phases=tuple(sc.merge.phases),
        streaming=sc.merge.fragments > 1,
        enabled=t.enabled,
    )


def monitor_spec(sc: Scenario) -> MonitorSpec:
    mon = sc.monitor
    return MonitorSpec(
        sample_s=mon.sample_s,
        pressure_window_s=mon.pressure_window_s,
        end_s=sc.horizon_s + sc.drain_s,
        max_num_seqs=sc.engine.max_num_seqs,
        h_min=sc.merge.h_min,
        h_max=sc.merge.h_max,
        step_time_s=sc.training.step_time_s,
        tokens_per_step=sc.training.tokens_per_step,
        check_invariants=mon.check_invariants,
    )


def workload_spec(sc: Scenario, params) -> WorkloadSpec:
    sp = sc.engine.shared_prefix
    return WorkloadSpec(
        params=params,
        closed_loop=WORKLOADS[params.kind].clients is not None,
        n_sidecars=sc.fleet.n_sidecars,
        horizon_s=sc.horizon_s,
        base_dir=sc.base_dir,
        source=sc.source,
        shared_prefix=(sp.fraction, sp.prompts, sp.tokens) if sp is not None else None,
    )


def router_spec(sc: Scenario, file: object) -> RouterSpec:
    """The router, parsed (an unknown name or params it does not take, `static`'s too: an input
    error naming router.*); a static one runs no process."""
    cls, params = router(sc, file)
    if cls.static:
        return RouterSpec(sc.router.name, None, None, False)
    return RouterSpec(cls.name, cls, params, True)


def _handoff(block, engine: EngineSpec, prefill: tuple[int, ...]) -> HandoffSpec | None:
    """`disagg:` or `remote_kv:` with its KV bytes per token (given, or the engine's model shape)."""
    if block is None:
        return None
    given = block.kv_bytes_per_token
    return HandoffSpec(prefill, given if given is not None else engine.kv_bytes_per_token)


def _cotenant(sc: Scenario, file: object, fitted: float | None) -> CotenantPlan | None:
    """`cotenant:` as a plan (models.cotenant): its weight given, or `fitted` (the profile's entry)."""
    c = sc.cotenant
    if c is None:
        return None
    sidecars = tuple(range(sc.fleet.n_sidecars)) if c.sidecars is None else tuple(sorted(set(c.sidecars)))
    weight = c.weight if c.weight is not None else fitted
    return cotenant_plan(c, float(weight), sidecars, sc.horizon_s, sc.base_dir, file)


def _extras(sc: Scenario, file: object) -> tuple:
    """What the blocks a plug-in resolves add to the run's result (models.results.blocks)."""
    return tuple(RESULT_BLOCKS[n].extra(b, sc.horizon_s, sc.base_dir, file) for n, b in plugin_blocks(sc, file))
