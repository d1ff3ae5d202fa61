"""Scenario schema: every field a YAML may set, its unit, default and source.

Only the shape of a scenario lives here (pydantic models, unknown keys rejected); loading a file
and checking the workload and policy against their registries is `models.spec.load`. Bandwidths are
in Gb/s (gigabits per second) throughout; sizes in bytes; times in seconds.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from wadiloco.models.spec.schema import Strict


def _auto_or_fraction(v):
    """`auto`, or a number in (0, 1]: one message for either mistake (a union's would list both)."""
    if v == "auto" or (isinstance(v, int | float) and not isinstance(v, bool) and 0 < v <= 1):
        return v
    raise ValueError("must be auto or a number in (0, 1]")


class FleetConfig(Strict):
    """Topology defaults follow SPEC.md section 2."""

    islands: int = Field(4, ge=1, le=256)
    hosts_per_island: int = Field(2, ge=1, le=256)
    learner_gpus_per_host: int = Field(8, ge=1, le=64)
    sidecars_per_host: int = Field(1, ge=0, le=64)
    # same_host: the sidecar has its own GPU; same_gpu: the host's outer-optimizer shard is
    # updated on the sidecar's GPU, so the outer step time-slices with serving.
    colocation: Literal["same_host", "same_gpu"] = "same_host"
    nic_gbps: float = Field(100.0, gt=0)
    switch_gbps: float = Field(3200.0, gt=0, description="intra-island switch backplane")
    interisland_gbps: float = Field(25.0, gt=0)
    # The island uplinks' capacity is interisland_gbps x this. auto: the share a socket ring
    # all-reduce gets of a link at that rate, g * eta(R) (models.network.collective, docs/network.md:
    # 0.752 at 25 Gb/s); a number overrides it (e.g. a measured NCCL busbw over the link's rate).
    wan_efficiency: Annotated[float | Literal["auto"], BeforeValidator(_auto_or_fraction)] = "auto"
    # What-if switches: a resource named here has unlimited capacity (no queueing on it).
    # `kv`: the engines' KV-cache pools are unlimited (no blocks, no preemption: engine.kv_blocks).
    unlimited: list[Literal["gpu", "host", "pcie", "nic", "links", "storage", "kv"]] = []
    # How training uses the GPUs (sim.gpushare; docs/model.md "Shared GPU"). merges: only merge work
    # reaches them (the outer step and staging on the sidecar's GPU under same_gpu). timeslice: training
    # time-slices the GPU all the time: inner steps hold the learner's GPU (the sidecar's under
    # same_gpu) between merges with weight interference.gpu_inner_weight (default the H200 `outer`
    # row's saturating co-tenant, 1.34), all-reduce kernels and checkpoint staging copies hold it with
    # the `stage` row's copy weight (0.013), and checkpoint staging crosses PCIe. mps: as timeslice, but
    # training's work on a GPU never runs faster than `mps_training_share` of it (CUDA MPS's active
    # thread percentage; an ASSUMPTION: no measurement of MPS here). mig: the sidecar has its own MIG
    # slice, training never touches it, the host is still shared (an ASSUMPTION: the slice serves at
    # the latency law's full-GPU speed).
    gpu_sharing: Literal["merges", "timeslice", "mps", "mig"] = "merges"
    mps_training_share: float = Field(0.5, gt=0, le=1)
    # The host's cores (models.training.host, sim.host). null: unlimited cores, no preemption (a fluid CPU path
    # per thread). A number (the calibration host has 16, its `cpus`): threads share the cores, and
    # when more are runnable than there are cores, engine and frontend threads are preempted with the
    # law fitted to the `cpu` row (p95 1.87x, p99 3.2x). Runnable: engine_threads per sidecar (its
    # scheduler/launch thread), frontend_threads per sidecar with frontend work (its API server),
    # learner_threads_per_gpu per learner GPU while its island steps (the training loop's thread),
    # and merge CPU work's own threads. The counts are ASSUMPTIONS (one busy thread each).
    host_cores: int | None = Field(None, ge=1, le=4096)
    engine_threads: int = Field(1, ge=0, le=256)
    frontend_threads: int = Field(1, ge=0, le=256)
    learner_threads_per_gpu: int = Field(1, ge=0, le=256)

    @property
    def n_hosts(self) -> int:
        return self.islands * self.hosts_per_island

    @property
    def n_sidecars(self) -> int:
        return self.n_hosts * self.sidecars_per_host


class SharedPrefix(Strict):
    """System prompts shared by a synthetic workload's requests (traces carry their own hashes): a
    `fraction` of requests start with one of `prompts` system prompts (uniformly) of `tokens` tokens.
    No defaults: there is no one published figure, so a scenario says what it models."""

    fraction: float = Field(ge=0, le=1)
    prompts: int = Field(ge=1, le=2**31)
    tokens: int = Field(ge=1, le=10_000_000)


class EngineConfig(Strict):
    """vLLM-like continuous batching. Defaults are vLLM's (max_num_seqs 256, chunked prefill)."""

    max_num_seqs: int = Field(256, ge=1, le=4096)
    max_num_batched_tokens: int = Field(8192, ge=1, le=1_000_000)
    # CUDA-graph decode (vLLM's default) leaves little CPU per step; eager decode is bound by
    # the CPU launching kernels (calibration: decode_eager_b64_ctx1024).
    cuda_graphs: bool = True
    # CPU work per iteration that runs beside the GPU work (scheduler, sampling, detokenise).
    # vLLM's profile of v0.5.3 (Llama 3 8B, 1xH100; vLLM blog 2024-09-05) puts scheduling at 29%
    # of execution time and the GPU at no more than the remaining 38%: h = 0.29/0.38 x the
    # calibration's decode step (6.43 ms, B=64, ctx 1024) = 4.9 ms. Newer engines overlap this
    # work with the GPU step, which is what max(h, g) models; set ~0.0005 for a lean engine.
    host_overhead_s: float = Field(0.0049, ge=0, le=10)
    fast_forward: bool = True
    # An engine profile (models.engine.profiles: a packaged name, or a YAML path relative to the scenario)
    # that other blocks read fitted numbers from, e.g. `cotenant.profile_entry`.
    profile: str | None = None
    # Engine generation: how host and GPU work compose in a step (models.engine.batching.EngineStep).
    # overlapped = vLLM V1 (async scheduling: the scheduler and output processing run beside the
    # GPU step, so a step takes max(h, f, g)); sequential = vLLM V0 (schedule, then the GPU step,
    # then output processing: h + g + f). vLLM blog 2024-09-05 (v0.6.0); REFERENCES.md.
    step: Literal["overlapped", "sequential"] = "overlapped"
    # Host time per step is host_overhead_s + host_per_seq_s*batch + host_per_token_s*scheduled
    # tokens. 0 = today's constant; docs/engine.md gives per-generation values and their sources.
    host_per_seq_s: float = Field(0.0, ge=0, le=1)
    host_per_token_s: float = Field(0.0, ge=0, le=1)
    # The API server (frontend) on its own CPU path of the host, where merge CPU work presses too:
    # per admitted request (parse, tokenise) and per output token (detokenise, stream). 0 = none.
    frontend_per_request_s: float = Field(0.0, ge=0, le=10)
    frontend_per_token_s: float = Field(0.0, ge=0, le=1)
    # A model of that profile: the engine's iteration becomes the profile's fitted law a + d*batch
    # (GPU only: host_overhead_s and cuda_graphs are then not used; prefill tokens cost nothing beyond
    # the iteration they run in, models.engine.profiles.ModelFit), and its start delay is the closed loop's.
    model: str | None = None
    # The GPU step's latency law (models.engine.latency): linear = SPEC.md's a + b*prefill + c*sum_ctx +
    # d*batch (R^2 0.960 on the H200 rows); attention adds causal prefill attention over the cached
    # context (R^2 0.997, max relative error 9.2%; `wadiloco calibrate` prints both).
    latency: Literal["linear", "attention"] = "linear"
    # KV-cache blocks (PagedAttention; models.engine.kv, docs/engine.md). A pool of `kv_blocks` blocks, or
    # one derived from `gpu_memory_gb` x `gpu_memory_utilization` - weights - activations over the
    # model shape's bytes per token; neither (the default): unlimited, today's engine.
    kv_blocks: int | None = Field(None, ge=1, le=100_000_000)
    kv_block_size: int = Field(16, ge=1, le=1024)  # vLLM's default block_size (CacheConfig)
    kv_watermark: float = Field(0.01, ge=0, lt=1)  # vLLM V0 BlockSpaceManager: free blocks kept at admission
    gpu_memory_gb: float | None = Field(None, gt=0, le=10_000)  # e.g. 141 (H200, NVIDIA datasheet; 1 GB = 1e9 B)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)  # vLLM's default gpu_memory_utilization
    # Model shape: Llama-3-8B's config.json (32 layers, 8 KV heads, head_dim 4096/32 = 128), bf16 KV
    model_layers: int = Field(32, ge=1, le=1024)
    model_kv_heads: int = Field(8, ge=1, le=1024)
    model_head_dim: int = Field(128, ge=1, le=4096)
    kv_dtype_bytes: int = Field(2, ge=1, le=8)
    weights_gb: float = Field(16.06, ge=0)  # Llama-3-8B: 8.03e9 parameters x 2 bytes (bf16)
    # vLLM measures activations by a profiling pass at max_num_batched_tokens; no published figure for
    # this shape, so 0 (an assumption: set it from the engine's startup log).
    activation_gb: float = Field(0.0, ge=0)
    # Merge buffers on a same_gpu sidecar's GPU (pseudo-gradients and the outer optimizer's state of the
    # host's shard: params / hosts_per_island x (pseudo_grad + checkpoint bytes per param)): none, held
    # for the whole run (`always`: allocated at start-up and kept, so the pool is smaller for good), or
    # only while a merge runs (`merge`: from the start of its first phase to the end of its last; the
    # pool shrinks then, preempting if it must, and grows back).
    merge_memory: Literal["none", "always", "merge"] = "none"
    # Prefix caching (models.engine.prefix, docs/engine.md): an LRU cache of this many prompt tokens, in whole
    # 512-token blocks keyed by the requests' block hashes (Mooncake's hash_ids block size, trace README);
    # hits skip prefill. With a KV pool the cache's blocks are reserved out of it. None or 0: off.
    prefix_cache: int | None = Field(None, ge=0, le=10_000_000_000)
    # How a KV pool preempts: recompute (vLLM V1's only mode: the request's blocks are freed and its
    # context recomputed) or swap (vLLM V0's preemption_mode="swap": a decoder's blocks go to host
    # memory over the host's PCIe link, merge.pcie_gbps, where merge staging copies contend, and come
    # back before it resumes). docs/engine.md.
    preemption: Literal["recompute", "swap"] = "recompute"
    # Block hashes for a synthetic workload's requests (traces bring their own): None, no hashes.
    shared_prefix: SharedPrefix | None = None

    @model_validator(mode="after")
    def _budget_holds_a_decode_step(self):
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least "
                f"max_num_seqs ({self.max_num_seqs}), as in vLLM: every running sequence decodes "
                "one token per step"
            )
        if self.model is not None and self.profile is None:
            raise ValueError("engine.model names a model of an engine profile: set engine.profile too")
        if self.preemption != "recompute" and self.kv_blocks is None and self.gpu_memory_gb is None:
            raise ValueError("engine.preemption swap preempts KV blocks: give the pool (kv_blocks or gpu_memory_gb)")
        if self.merge_memory != "none" and self.kv_blocks is None and self.gpu_memory_gb is None:
            raise ValueError("engine.merge_memory takes KV blocks: give the pool (kv_blocks or gpu_memory_gb)")
        return self


class SLOConfig(Strict):
    """DistServe/Vidur-range thresholds; null turns one off. A request violates when any set one is
    exceeded: TTFT, TPOT, or (`e2e_s`, off by default) its end-to-end latency, which in a closed
    loop of batches is the batch's (the testbed's SLO, paper_testbed.md 2.5)."""

    ttft_s: float | None = Field(1.0, gt=0)
    tpot_s: float | None = Field(0.1, gt=0)
    e2e_s: float | None = Field(None, gt=0)


class TrainingConfig(Strict):
    step_time_s: float = Field(0.5, gt=0)
    step_jitter: float = Field(0.05, ge=0, lt=1, description="relative std-dev of a step's time")
    params: float = Field(1.0e9, gt=0, le=1e13)
    tokens_per_step: float = Field(524288.0, gt=0, description="per island")
    initial_loss_tokens: float = Field(1.0e9, ge=0, description="tokens seen before the run")


MERGE_PHASES = ("stage", "allreduce", "outer", "ckpt")  # the order a merge runs them in (sim.training)


class MergeConfig(Strict):
    h_min: int = Field(128, ge=1)
    h_max: int = Field(512, ge=1)
    # Which phases a merge runs, in this order; [] makes a merge instantaneous (the testbed has no
    # DiLoCo traffic: its "merges" are timetable windows of a co-tenant, `cotenant:`).
    phases: list[Literal[MERGE_PHASES]] = list(MERGE_PHASES)
    pseudo_grad_bytes_per_param: float = Field(2.0, gt=0, description="bf16")
    checkpoint_bytes_per_param: float = Field(8.0, gt=0, description="fp32 params + fp32 outer momentum")
    # Every island writes its replica, sharded over its hosts (per-island restart).
    checkpoint_gbps: float = Field(80.0, gt=0, description="aggregate store write bandwidth")
    # Checkpoint serialisation is CPU work, separate from the write: `serialize_threads` threads at
    # `serialize_gbps` each turn the shard into bytes (the host CPU is pressed for exactly that long),
    # and the write streams them to the store no faster than they are made. Per thread: torch.save of a
    # 4 GB host tensor, one thread, ran at 0.64-0.79 GB/s (../shared/calibration `ckpt_GBps`): 5.6 Gb/s.
    serialize_gbps: float = Field(5.6, gt=0, description="checkpoint serialisation per thread")
    serialize_threads: int = Field(1, ge=1, le=256, description="threads serialising a host's shard")
    pcie_gbps: float = Field(440.0, gt=0, description="per-host GPU<->pinned host staging")
    outer_elements_per_s: float = Field(4.0e10, gt=0, description="fp32 Nesterov update rate, one GPU")
    # The ring all-reduce's own costs beside its bytes (models.network.collective, docs/network.md):
    # each call pays 2(islands-1) ring steps of this latency (the socket figure fitted on the
    # measured cluster, 106 us); a sync of one flat buffer is one call (the measured DiLoCo runs
    # made ~49, per-tensor); the first all-reduce of a run pays the set-up once (communicators:
    # 0.72 s measured on a cold start; 0 here, where a scenario is a window of a running job).
    ring_step_latency_s: float = Field(1.06e-4, ge=0, le=10, description="latency per ring step")
    allreduce_calls: int = Field(1, ge=1, le=1_000_000, description="collective calls per synchronisation")
    allreduce_setup_s: float = Field(0.0, ge=0, le=3600, description="one-off cost of the first all-reduce")
    # ---- mitigations a training team can switch on (issue 15 item 4; sim.checkpoint, sim.merge) ----
    # Each default keeps today's merge. async = PyTorch DCP's async_save: the merge blocks only while
    # the shard is staged to pinned host memory over PCIe, then serialisation and the write run in
    # the background while training resumes (their CPU pressure with them). DCP's published numbers:
    # 7B checkpoint downtime 148.8 s sync -> 6.3 s async (PyTorch blog 2024); Llama-3-70B on 1,856
    # H200s, blocking staging 0.78 s (PyTorch blog 2025). Here the staging time follows from pcie_gbps.
    checkpoint_mode: Literal["sync", "async"] = "sync"
    # At most this many hosts serialise and write their shard at once (the rest queue); null: all.
    checkpoint_stagger: int | None = Field(None, ge=1, le=65536)
    # Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512): the model in `fragments` parts,
    # fragment p synchronised p x fragment_offset_steps inner steps after its round starts (null:
    # h_min // fragments, the paper's H/P staggering), each overlapping the inner steps that follow.
    fragments: int = Field(1, ge=1, le=256)
    fragment_offset_steps: int | None = Field(None, ge=0, le=1_000_000)
    # Compressed pseudo-gradients: int8 (INTELLECT-1, arXiv 2412.01152) or 4-bit (Streaming DiLoCo)
    # all-reduce payloads, for a quantise and a dequantise pass over the shard on the outer step's
    # GPU (at compress_gpu_elements_per_s, assumed as fast as the fp32 outer step) or the host CPU
    # (compress_host_elements_per_s: an assumption, ~1 GB/s of fp32 per core).
    compression: Literal["none", "int8", "int4"] = "none"
    compression_on: Literal["gpu", "host"] = "gpu"
    compress_gpu_elements_per_s: float = Field(4.0e10, gt=0)
    compress_host_elements_per_s: float = Field(2.5e8, gt=0)

    @model_validator(mode="after")
    def _corridor(self):
        if self.h_min > self.h_max:
            raise ValueError(f"h_min ({self.h_min}) must not exceed h_max ({self.h_max})")
        return self

    @field_validator("phases")
    @classmethod
    def _in_order(cls, v: list[str]) -> list[str]:
        if v != [p for p in MERGE_PHASES if p in v]:
            raise ValueError(f"phases must be distinct and in the order {', '.join(MERGE_PHASES)} (got {v})")
        return v


class InterferenceConfig(Strict):
    """Processor-sharing weights of merge work against one serving iteration (weight 1).

    `null` means: fit from ../shared/calibration (models.training.interference)."""

    gpu_outer_weight: float | None = Field(None, ge=0)
    # An inner training step on a GPU it shares (fleet.gpu_sharing timeslice/mps); null: gpu_outer's fit.
    gpu_inner_weight: float | None = Field(None, gt=0)
    gpu_stage_weight: float | None = Field(None, ge=0)
    host_ckpt_weight: float | None = Field(None, ge=0)
    host_stage_weight: float | None = Field(None, ge=0)


# ---- on/off timetables (models.testbed.timetables) and the GPU co-tenant that follows one ------------
# Times are seconds of simulated time, which is the testbed's serving time (0 = its `start`).


class PeriodicTimetable(Strict):
    """On when (t + phase_s) mod period_s <= window_s (`<` unless inclusive): Stage 10's sync windows."""

    kind: Literal["periodic"]
    period_s: float = Field(gt=0)
    window_s: float = Field(ge=0)
    phase_s: float = Field(0.0, ge=0)
    inclusive: bool = True


class PressureTimetable(Strict):
    """On while the testbed's pressure schedule (paper_testbed.md 3.2) is high: max >= threshold."""

    kind: Literal["pressure"]
    period_s: float = Field(90.0, gt=0)
    threshold: float = Field(0.6, ge=0, le=1)


class BurstyTimetable(Strict):
    """On while (t + phase_s) mod period_s < window_s (strict): the bursty profile's busy test (2.4)."""

    kind: Literal["bursty"]
    period_s: float = Field(120.0, gt=0)
    window_s: float = Field(30.0, ge=0)
    phase_s: float = Field(0.0, ge=0)


class WindowsTimetable(Strict):
    """Windows [s, s + window_s] at explicit starts: a list, or a file (one number per line, or a
    coordinator JSONL log; path relative to the scenario). With `repeat`, time wraps mod D as the
    replay's --sync-events-repeat did, D = `repeat_s` or the trace's own length (3.4)."""

    kind: Literal["windows"]
    starts: list[Annotated[float, Field(ge=0)]] | None = None
    file: str | None = None
    window_s: float = Field(8.0, ge=0)
    repeat: bool = True
    repeat_s: float | None = Field(None, gt=0, description="trace length D the wrap uses")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.starts is None) == (self.file is None):
            raise ValueError("give exactly one of `starts` (a list) and `file`")
        return self


class MergesTimetable(Strict):
    """A window of window_s after each merge of the run's own trainer ends."""

    kind: Literal["merges"]
    window_s: float = Field(8.0, ge=0)


class NoTimetable(Strict):
    kind: Literal["none"]


class UnionTimetable(Strict):
    """On while any of `of` is on (Stage 10's `both`: pressure or periodic sync)."""

    kind: Literal["union"]
    of: list[TimetableSpec] = Field(min_length=1)


TimetableSpec = Annotated[
    PeriodicTimetable
    | PressureTimetable
    | BurstyTimetable
    | WindowsTimetable
    | MergesTimetable
    | NoTimetable
    | UnionTimetable,
    Field(discriminator="kind"),
]
UnionTimetable.model_rebuild()


class CotenantConfig(Strict):
    """A process on the serving GPU that computes while its timetable is on (the testbed's matmul
    stress loop): a hold of weight `weight` on each chosen sidecar's GPU link (sim.cotenant). Its
    weight is given, or fitted: `profile_entry` names a co-tenant of the engine profile
    (`engine.profile`). It switches on at the first `poll_s` tick at or after a window opens (the
    stress loop sleeps 50 ms while idle) and off when the window closes; never past horizon_s."""

    timetable: TimetableSpec
    weight: float | None = Field(None, gt=0, le=1000)
    profile_entry: str | None = None
    sidecars: list[Annotated[int, Field(ge=0)]] | None = Field(None, description="sidecar indices; null: all")
    poll_s: float = Field(0.05, ge=0, le=60)

    @model_validator(mode="after")
    def _one_weight(self):
        if (self.weight is None) == (self.profile_entry is None):
            raise ValueError("give exactly one of `weight` and `profile_entry` (with engine.profile)")
        return self


class DisaggConfig(Strict):
    """Disaggregated prefill/decode serving (DistServe, Splitwise, Mooncake; sim.disagg, docs/model.md
    "Disaggregated serving"). The sidecars named in `prefill_sidecars` (fleet indices: sidecar s is
    on host s // sidecars_per_host, hosts island-major) only prefill: the fleet's arrivals, in time
    order, are dealt to them round-robin, each run with its output cut to the first token. Every
    other sidecar decodes: a prefilled request's KV (prompt tokens x `kv_bytes_per_token`) moves
    over the fabric links between the two sidecars' hosts (NIC, switch, island uplinks: the links
    the all-reduce and checkpoint writes use) to the decode sidecar of its island with the fewest
    requests (all decode sidecars if its island has none), which admits it with the whole prompt
    cached. TTFT is the prefill's first token plus the KV transfer (Splitwise: the first token
    reaches the client when the decode side holds the KV)."""

    prefill_sidecars: list[Annotated[int, Field(ge=0)]] = Field([0], min_length=1)
    # null: the engine's model shape (models.engine.kv.bytes_per_token): 2 x 32 layers x 8 KV heads x 128 dims
    # x 2 bytes = 131072 (128 KiB) for Llama-3-8B in bf16 (REFERENCES.md, calibration/README.md)
    kv_bytes_per_token: int | None = Field(None, ge=1, le=1 << 30)

    @field_validator("prefill_sidecars")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"prefill_sidecars must be distinct (got {v})")
        return v


class RemoteKVConfig(Strict):
    """A remote KV/prefix pool (Mooncake's distributed KV pool, LMCache's peer sharing; sim.kvstore,
    docs/model.md "Remote KV pool"): with engine.prefix_cache on, the sidecars' prefix caches are one
    pool; a request whose leading blocks another sidecar holds beyond its own fetches their KV from
    that sidecar's host over the network fabric before it enters its engine (TTFT waits for it)."""

    # null: the engine's model shape (models.engine.kv.bytes_per_token): 128 KiB for Llama-3-8B in bf16
    kv_bytes_per_token: int | None = Field(None, ge=1, le=1 << 30)


class LabelsConfig(Strict):
    """Testbed labels on every request, read at its start (the batch start of a closed loop):
    `sync_active` from the `sync` timetable; with `pressure`, also `max_pressure` (the 3.2 values,
    or the bursty labels 0.95 busy / 0.20 quiet, 2.6) and `high_pressure` (max >= 0.6)."""

    sync: TimetableSpec = MergesTimetable(kind="merges")
    pressure: Annotated[PressureTimetable | BurstyTimetable, Field(discriminator="kind")] | None = None


class PolicyConfig(Strict):
    name: str = "fixed"
    params: dict[str, Any] = {}


class RouterConfig(Strict):
    """The router in front of the sidecars (models/routers; `wadiloco routers` lists them): `static`
    keeps the workload's own dealing (workload.spread) and runs no router."""

    name: str = "static"
    params: dict[str, Any] = {}


class MonitorConfig(Strict):
    pressure_window_s: float = Field(30.0, gt=0)
    sample_s: float = Field(1.0, gt=0, description="timeline sampling period")
    check_invariants: bool = False


class Scenario(Strict):
    name: str = "scenario"
    description: str = ""
    horizon_s: float = Field(600.0, gt=0, le=7 * 86400)
    drain_s: float = Field(120.0, ge=0, le=7 * 86400, description="time after the horizon to finish in-flight requests")
    fleet: FleetConfig = FleetConfig()
    engine: EngineConfig = EngineConfig()
    slo: SLOConfig = SLOConfig()
    training: TrainingConfig = TrainingConfig()
    merge: MergeConfig = MergeConfig()
    interference: InterferenceConfig = InterferenceConfig()
    workload: dict[str, Any] = {"kind": "normal"}
    policy: PolicyConfig = PolicyConfig()
    router: RouterConfig = RouterConfig()
    monitor: MonitorConfig = MonitorConfig()
    cotenant: CotenantConfig | None = None
    testbed_labels: LabelsConfig | None = None
    disagg: DisaggConfig | None = None  # null: every sidecar prefills and decodes its own requests
    remote_kv: RemoteKVConfig | None = None  # null: a sidecar reads only its own prefix cache
    # Where relative paths (traces) resolve from: the scenario file's folder. Not a YAML field.
    base_dir: str = Field(".", exclude=True)
    source: str = Field("<scenario>", exclude=True)

    @model_validator(mode="after")
    def _cotenant_sidecars(self):
        n = self.fleet.n_sidecars
        if self.cotenant is not None and any(i >= n for i in self.cotenant.sidecars or ()):
            raise ValueError(f"cotenant.sidecars: the fleet has {n} sidecar(s), indices 0..{n - 1}")
        return self

    @model_validator(mode="after")
    def _disagg_sidecars(self):
        d, n = self.disagg, self.fleet.n_sidecars
        if d is not None and (max(d.prefill_sidecars) >= n or len(d.prefill_sidecars) >= n):
            raise ValueError(
                f"disagg.prefill_sidecars {d.prefill_sidecars}: the fleet has {n} sidecar(s), indices 0..{n - 1}, "
                "and needs at least one left to decode"
            )
        if d is not None and self.remote_kv is not None:
            raise ValueError("disagg and remote_kv do not combine: prefill sidecars keep no prefix cache to pool")
        return self

    @model_validator(mode="after")
    def _start_delay_from_profile(self):
        if self.workload.get("start_delay_s") == "profile" and self.engine.model is None:
            raise ValueError("workload.start_delay_s: profile needs engine.profile and engine.model")
        return self

    def digest(self) -> str:
        """Stable hash of everything that changes results. Opt-in fields at their defaults are left
        out, so adding one changes no existing scenario's hash (runs.csv's scenario_hash)."""
        data = self.model_dump(mode="json")
        default = _default_dump()
        for dotted in OPT_IN_FIELDS:
            *path, key = dotted.split(".")
            node, ref = data, default
            for part in path:
                node, ref = node[part], ref[part]
            if node[key] == ref[key]:
                del node[key]
        blob = json.dumps(data, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# Fields added after scenario hashes were first recorded: `digest()` skips each while at its default.
OPT_IN_FIELDS = (
    "engine.profile",
    "engine.model",
    "slo.e2e_s",
    "merge.phases",
    "cotenant",
    "testbed_labels",
    "engine.step",
    "engine.host_per_seq_s",
    "engine.host_per_token_s",
    "engine.frontend_per_request_s",
    "engine.frontend_per_token_s",
    "engine.latency",
    "merge.serialize_threads",
    "engine.kv_blocks",
    "engine.kv_block_size",
    "engine.kv_watermark",
    "engine.gpu_memory_gb",
    "engine.gpu_memory_utilization",
    "engine.model_layers",
    "engine.model_kv_heads",
    "engine.model_head_dim",
    "engine.kv_dtype_bytes",
    "engine.weights_gb",
    "engine.activation_gb",
    "engine.merge_memory",
    "engine.prefix_cache",
    "engine.shared_prefix",
    "engine.preemption",
    "merge.checkpoint_mode",
    "merge.checkpoint_stagger",
    "merge.fragments",
    "merge.fragment_offset_steps",
    "merge.compression",
    "merge.compression_on",
    "merge.compress_gpu_elements_per_s",
    "merge.compress_host_elements_per_s",
    "fleet.gpu_sharing",
    "fleet.mps_training_share",
    "fleet.host_cores",
    "fleet.engine_threads",
    "fleet.frontend_threads",
    "fleet.learner_threads_per_gpu",
    "interference.gpu_inner_weight",
    "router",
    "disagg",
    "remote_kv",
)


@lru_cache(maxsize=1)
def _default_dump() -> dict:
    return Scenario().model_dump(mode="json")
