"""One run's specification: a scenario resolved once into typed sub-specs, every number derived.

models/spec/resolve.py builds a `RunSpec` from a validated `Scenario`; nothing past it reads the
scenario. The fleet (sim.fleet) hands each part its own sub-spec: the resources and topology a
`FleetSpec`, the engines an `EngineSpec` (the latency law, host time per iteration, the engine step,
KV pool and prefix cache sizes), the merge executor a `MergeSpec` (phase sizes, bandwidths and
interference weights), the trainer a `TrainingSpec`, the monitor a `MonitorSpec`, the policy a
`PolicySpec`, the arrivals a `WorkloadSpec`; the extras (a router, disaggregated serving, a remote KV
pool, a GPU co-tenant) theirs, or None; the blocks a plug-in resolves (the testbed's labels) come as
result extras (`extras`). Sizes in bytes, bandwidths in Gb/s, times in seconds, as in the scenario.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pydantic import BaseModel

from wadiloco.models.cotenant import CotenantPlan
from wadiloco.models.engine.batching import EngineStep
from wadiloco.models.engine.laws import LatencyLaw, law_of
from wadiloco.models.policies import Params, Policy
from wadiloco.models.spec.load import check_policy_in
from wadiloco.models.training.interference import InterferenceWeights


@dataclass(frozen=True)
class FleetSpec:
    """Hosts, their GPUs, CPU paths and links. Every capacity is final: +inf where `fleet.unlimited`
    names the resource (so nothing queues on it)."""

    islands: int
    hosts_per_island: int
    sidecars_per_host: int
    learner_gpus_per_host: int
    same_gpu: bool  # colocation same_gpu: the outer-optimizer shard lives on the sidecars' GPUs
    gpu_sharing: str  # merges, timeslice, mps or mig (sim.gpushare)
    mps_training_share: float
    host_cores: int | None  # fleet.host_cores as given (threads are counted when set)
    cores: int | None  # the cores that preempt: None without host_cores or with the host unlimited
    engine_threads: int
    frontend_threads: int
    learner_threads_per_gpu: int
    frontends: bool  # the engines have frontend (API server) work: one more CPU path per sidecar
    gpu_capacity: float
    cpu_capacity: float
    pcie_gbps: float
    nic_gbps: float
    switch_gbps: float
    wan_gbps: float  # an island uplink: interisland_gbps x wan_efficiency (auto: models.network.collective)
    store_gbps: float  # the checkpoint store's write path
    checkpoint_store: str  # global (one store behind the WAN core) or per_island (sim.topology)
    island_store_gbps: float  # an island's store's write path (per_island)
    serialize_gbps: float  # a host's checkpoint serialisers: per-thread rate x threads

    @property
    def n_hosts(self) -> int:
        return self.islands * self.hosts_per_island

    @property
    def n_sidecars(self) -> int:
        return self.n_hosts * self.sidecars_per_host


@dataclass(frozen=True)
class KVSpec:
    """One engine's KV-cache pool (models.engine.kv.KVPool): `blocks` of `block_size` tokens, of which
    `reserved` are never the requests' (a prefix cache's, merge buffers held always) and `hold` are
    taken while a merge runs (engine.merge_memory `merge`)."""

    blocks: int
    block_size: int
    watermark: float
    reserved: int
    hold: int
    preemption: str  # what preemption does with a decoder (engine.preemption: models.engine.preemption.MODES)


@dataclass(frozen=True)
class PrefixSpec:
    """A prefix cache of `capacity` blocks of `block_tokens` tokens (models.engine.prefix)."""

    capacity: int
    block_tokens: int


@dataclass(frozen=True)
class EngineSpec:
    """Every sidecar's engine: the iteration's laws and sizes."""

    latency: LatencyLaw  # the GPU step's law (models.engine.laws): linear, attention, a table, or a profile's fit
    host_s: float  # fixed host time per iteration (0 under a profile's model: its law is the whole iteration)
    step: EngineStep
    max_num_seqs: int
    max_num_batched_tokens: int
    fast_forward: bool
    kv: KVSpec | None  # a sidecar's pool (None: unlimited)
    kv_holder: KVSpec | None  # the pool of a sidecar that holds its host's merge buffers (`holds_merge`)
    kv_hold_every: int  # sidecar s holds them when this is > 0 and s % it == 0 (its host's first GPU)
    prefix: PrefixSpec | None
    block_bytes: int  # bytes of one KV block (what a swap copies per block)
    kv_bytes_per_token: int  # the model shape's KV bytes per token
    start_delay_s: float | None  # an engine profile's serving start delay (closed loops), or None

    def pool(self, s: int) -> KVSpec | None:
        """Sidecar s's KV pool."""
        return self.kv_holder if self.kv_hold_every and s % self.kv_hold_every == 0 else self.kv


@dataclass(frozen=True)
class MergeSpec:
    """A merge's phases on the fleet: what each moves or computes, at which rates, and how hard its
    holds press on serving (`weights`). `frac` is the share of the model a phase merges (1, or one
    Streaming DiLoCo fragment's)."""

    phases: tuple[str, ...]
    weights: InterferenceWeights
    shard_params: float  # parameters of a host's shard: params / hosts_per_island
    pseudo_grad_bytes_per_param: float
    checkpoint_bytes_per_param: float
    outer_elements_per_s: float
    checkpoint_mode: str  # sync or async
    checkpoint_stagger: int | None
    serialize_threads: int
    fragments: int
    fragment_offset_steps: int
    compression: str  # none, int8 or int4
    compressed_bytes_per_param: float  # of a compressed all-reduce payload (0 without compression)
    compression_on: str  # gpu or host
    compress_gpu_elements_per_s: float
    compress_host_elements_per_s: float
    ring_wait_s: float  # an all-reduce's fixed time: every call's ring steps (models.network.collective)
    allreduce_setup_s: float  # paid once, by a run's first all-reduce

    def shard(self, frac: float = 1.0) -> float:
        """Parameters each host of an island holds a shard of (of the fragment being merged)."""
        return self.shard_params * frac

    def stage_gbits(self, frac: float = 1.0) -> float:
        return self.shard(frac) * self.pseudo_grad_bytes_per_param * 8 / 1e9

    def ckpt_gbits(self, frac: float = 1.0) -> float:
        return self.shard(frac) * self.checkpoint_bytes_per_param * 8 / 1e9


@dataclass(frozen=True)
class TrainingSpec:
    islands: int
    params: float
    tokens_per_step: float
    initial_loss_tokens: float
    step_time_s: float
    step_jitter: float
    horizon_s: float
    phases: tuple[str, ...]  # a merge's phases, in order (none: instantaneous)
    streaming: bool  # merge.fragments > 1: a merge is a Streaming DiLoCo round
    enabled: bool = True  # training.enabled: false: the islands never step (a fleet that only serves)


@dataclass(frozen=True)
class MonitorSpec:
    sample_s: float
    pressure_window_s: float
    end_s: float  # horizon_s + drain_s
    max_num_seqs: int  # a sidecar's batch slots (p_srv's occupancy)
    h_min: int
    h_max: int
    step_time_s: float
    tokens_per_step: float
    check_invariants: bool


@dataclass(frozen=True)
class SLOSpec:
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None


@dataclass(frozen=True)
class WorkloadSpec:
    """What the arrivals are drawn from, besides the engine (one sidecar's capacity) and the seed."""

    params: BaseModel  # the workload kind's params (models.workload.kinds); a trace is loaded
    closed_loop: bool  # its kind makes clients (models.workload.clients), not arrivals
    n_sidecars: int
    horizon_s: float
    base_dir: str
    source: str
    shared_prefix: tuple[float, int, int] | None  # engine.shared_prefix: (fraction, prompts, tokens)


@dataclass(frozen=True)
class PolicySpec:
    """The policy a run uses, its validated params, and what its context holds."""

    cls: type[Policy]
    params: Params
    h_min: int
    h_max: int
    base_dir: str
    horizon_s: float
    step_time_s: float
    n_sidecars: int
    scenario_policy: tuple[str, dict]  # the scenario's own (name, raw params): what `with_policy` falls back to

    @property
    def name(self) -> str:
        return self.cls.name

    def with_policy(self, name: str | None, params: dict | None, file: object, where: str) -> PolicySpec:
        """Another policy in the same context, its params checked against the same corridor and folder;
        by name and raw params as models.spec.load.policy_choice picks them (the scenario's own if
        `name` is None; the scenario's params for its own policy named without params)."""
        own_name, own_params = self.scenario_policy
        name = name or own_name
        if params is None:
            params = own_params if name == own_name else {}
        cls, p = check_policy_in(name, params, self.h_min, self.h_max, self.base_dir, file, where)
        return replace(self, cls=cls, params=p)


@dataclass(frozen=True)
class RouterSpec:
    """The router in front of the sidecars (models/routers): `routed` when a router process runs, with
    its class and parsed params; `static` keeps the workload's own dealing (none of either)."""

    name: str
    cls: type | None
    params: BaseModel | None
    routed: bool


@dataclass(frozen=True)
class HandoffSpec:
    """Disaggregated serving's prefill sidecars (`disagg:`; none for `remote_kv:`) and the KV bytes per
    prompt token a hand-off or a fetch moves."""

    prefill_sidecars: tuple[int, ...]
    kv_bytes_per_token: int


@dataclass(frozen=True)
class RunSpec:
    name: str
    digest: str  # Scenario.digest(): what ran
    source: str  # the scenario's file (input errors name it)
    horizon_s: float
    drain_s: float
    fleet: FleetSpec
    engine: EngineSpec
    merge: MergeSpec
    training: TrainingSpec
    monitor: MonitorSpec
    slo: SLOSpec
    workload: WorkloadSpec
    policy: PolicySpec
    router: RouterSpec
    disagg: HandoffSpec | None = None
    remote_kv: HandoffSpec | None = None
    cotenant: CotenantPlan | None = None
    extras: tuple = ()  # result extras of the blocks a plug-in resolves (models.results.blocks)

    @property
    def policy_name(self) -> str:
        return self.policy.name

    @property
    def params(self) -> Params:
        return self.policy.params

    @property
    def end_s(self) -> float:
        return self.monitor.end_s

    def with_policy(self, name: str | None, params: dict | None, file: object = None, where: str = "policy") -> RunSpec:
        """The same run with another policy (PolicySpec.with_policy)."""
        return replace(self, policy=self.policy.with_policy(name, params, self.source if file is None else file, where))

    def with_planned(self, cls: type[Policy], params: Params) -> RunSpec:
        """The same run with a policy object built here (an oracle's what-if: merges at given steps)."""
        return replace(self, policy=replace(self.policy, cls=cls, params=params))

    def with_latency(self, latency) -> RunSpec:
        """The same run with another GPU step law (tests, metamorphic checks; a fitted model: its law)."""
        return replace(self, engine=replace(self.engine, latency=law_of(latency)))
