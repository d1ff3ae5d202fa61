"""Scenario schema: every field a YAML may set, with its unit, meaning and source.

Only the shape of a scenario lives here (pydantic models, unknown keys rejected); loading a file
and checking the workload and policy against their registries is `models.spec.load`. Bandwidths are
in Gb/s (gigabits per second) throughout; sizes in bytes; times in seconds.

Every field's description reads "meaning. Unit: U. Source: S." (the unit only where the field has
one); `python -m wadiloco.experiments.reference` turns them into docs/reference/scenario.md, and
each source is quoted with its figures in docs/sources.md.
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
    """The hardware: islands of hosts, their network, and how serving and training share it."""

    islands: int = Field(4, ge=1, le=256, description="DiLoCo islands. Unit: islands. Source: design card.")
    hosts_per_island: int = Field(
        2, ge=1, le=256, description="Hosts in each island. Unit: hosts. Source: design card."
    )
    learner_gpus_per_host: int = Field(
        8, ge=1, le=64, description="Training GPUs on each host. Unit: GPUs. Source: design card."
    )
    sidecars_per_host: int = Field(
        1,
        ge=0,
        le=64,
        description="Serving sidecars (vLLM-like engines) on each host. Unit: sidecars. Source: design card.",
    )
    colocation: Literal["same_host", "same_gpu"] = Field(
        "same_host",
        description="same_host: each sidecar has a GPU of its own; same_gpu: the host's share of the outer step "
        "runs on the sidecar's GPU and time-slices with serving. Source: design card.",
    )
    nic_gbps: float = Field(100.0, gt=0, description="Each host's NIC, per direction. Unit: Gb/s. Source: design card.")
    switch_gbps: float = Field(
        3200.0,
        gt=0,
        description="The intra-island switch backplane. Unit: Gb/s. Source: assumption (never the bottleneck: "
        "32 ports of 100 Gb/s).",
    )
    interisland_gbps: float = Field(
        25.0, gt=0, description="Each island's uplink to the WAN core. Unit: Gb/s. Source: design card."
    )
    wan_efficiency: Annotated[float | Literal["auto"], BeforeValidator(_auto_or_fraction)] = Field(
        "auto",
        description="Share of interisland_gbps a ring all-reduce achieves. auto: g x eta(R), the share a socket "
        "ring gets of a link at rate R (models/network/collective.py: 0.752 at 25 Gb/s); a number overrides it "
        "(e.g. a measured NCCL bus bandwidth over the link's rate; the design card's figure was 0.6). Unit: "
        "fraction. Source: the measured DiLoCo cluster (docs/network.md).",
    )
    unlimited: list[Literal["gpu", "host", "pcie", "nic", "links", "storage", "kv"]] = Field(
        [],
        description="What-if switches: each resource named has unlimited capacity, so nothing queues on it "
        "(`kv`: no KV-cache pool, no preemption). Removes exactly the interference the resource causes. "
        "Source: design card (the emergence test).",
    )
    gpu_sharing: Literal["merges", "timeslice", "mps", "mig"] = Field(
        "merges",
        description="What training puts on the GPU it runs on (the sidecar's under same_gpu). merges: merge work "
        "only; timeslice: also inner steps (weight interference.gpu_inner_weight), all-reduce kernels and "
        "checkpoint staging copies (the stage weight); mps: as timeslice, training capped at mps_training_share "
        "of the GPU; mig: the sidecar's slice is its own (docs/model.md, Shared GPU). Source: H200 calibration "
        "(outer and stage rows); mps and mig are assumptions.",
    )
    mps_training_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Under gpu_sharing mps, the most of a GPU training's work may take (CUDA MPS's active thread "
        "percentage). Unit: fraction. Source: assumption (no MPS measurement).",
    )
    host_cores: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Cores each host's threads share; when more threads are runnable than cores, engine and "
        "frontend threads are preempted by the law fitted to the cpu row (p95 1.87x, p99 3.2x). null: unlimited "
        "cores, no preemption. Unit: cores. Source: H200 calibration (`cpus` 16; the cpu row).",
    )
    engine_threads: int = Field(
        1,
        ge=0,
        le=256,
        description="Busy threads of each sidecar's engine (scheduler, kernel launches), counted only with "
        "host_cores. Unit: threads. Source: assumption.",
    )
    frontend_threads: int = Field(
        1,
        ge=0,
        le=256,
        description="Busy threads of each sidecar's API server when it has frontend work, counted only with "
        "host_cores. Unit: threads. Source: assumption.",
    )
    learner_threads_per_gpu: int = Field(
        1,
        ge=0,
        le=256,
        description="Busy training-loop threads per learner GPU while its island steps, counted only with "
        "host_cores. Unit: threads. Source: assumption.",
    )

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

    fraction: float = Field(
        ge=0,
        le=1,
        description="Share of requests that start with a system prompt. Unit: fraction. Source: the scenario.",
    )
    prompts: int = Field(
        ge=1, le=2**31, description="Distinct system prompts, drawn uniformly. Unit: prompts. Source: the scenario."
    )
    tokens: int = Field(
        ge=1, le=10_000_000, description="Length of each system prompt. Unit: tokens. Source: the scenario."
    )


class EngineConfig(Strict):
    """vLLM-like continuous batching. Defaults are vLLM's (max_num_seqs 256, chunked prefill)."""

    max_num_seqs: int = Field(
        256, ge=1, le=4096, description="Most requests running at once. Unit: requests. Source: vLLM defaults."
    )
    max_num_batched_tokens: int = Field(
        8192,
        ge=1,
        le=1_000_000,
        description="Token budget of one iteration: one decode token per running request, the rest prefill "
        "chunks. Unit: tokens. Source: vLLM defaults.",
    )
    cuda_graphs: bool = Field(
        True,
        description="Decode replayed as CUDA graphs (little CPU per step); false: eager decode, bound by the CPU "
        "launching kernels (6.87 ms per iteration at B=64). Source: vLLM defaults; H200 calibration "
        "(decode_eager_b64_ctx1024).",
    )
    host_overhead_s: float = Field(
        0.0049,
        ge=0,
        le=10,
        description="CPU work per iteration beside the GPU work (scheduler, sampling, detokenising): 0.29/0.38 x "
        "the calibration's 6.43 ms decode step. About 0.0005 models a lean engine. Unit: s. Source: vLLM blog "
        "2024-09-05; H200 calibration.",
    )
    fast_forward: bool = Field(
        True,
        description="Skip runs of pure-decode iterations in closed form (bit-identical to stepping them one by "
        "one; false is for tests and benchmarks). Source: the simulator's design.",
    )
    profile: str | None = Field(
        None,
        description="An engine profile (a packaged name, or a YAML path relative to the scenario) that other "
        "fields read fitted numbers from, e.g. cotenant.profile_entry; `wadiloco calibrate PROFILE` prints its "
        "fit. Source: the profile's own data (b200_vllm0102_eager: the paper's testbed).",
    )
    step: Literal["overlapped", "sequential"] = Field(
        "overlapped",
        description="How host and GPU work compose in a step. overlapped = vLLM V1 (async scheduling: "
        "max(h, f, g)); sequential = vLLM V0 (schedule, GPU step, output processing in series: h + g + f). "
        "Source: vLLM blog 2024-09-05 (docs/engine.md).",
    )
    host_per_seq_s: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Host time per running request per step, added to host_overhead_s. Unit: s. Source: "
        "assumption (no published split).",
    )
    host_per_token_s: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Host time per scheduled token per step, added to host_overhead_s. Unit: s. Source: "
        "assumption (no published split).",
    )
    frontend_per_request_s: float = Field(
        0.0,
        ge=0,
        le=10,
        description="API-server CPU time per admitted request (parse, tokenise), on its own CPU path where merge "
        "CPU work presses too. Unit: s. Source: assumption (no published V1 figure).",
    )
    frontend_per_token_s: float = Field(
        0.0,
        ge=0,
        le=1,
        description="API-server CPU time per output token (detokenise, stream); v0.5.3 measured 8.7e-5 "
        "(docs/engine.md). Unit: s. Source: assumption for V1; vLLM blog 2024-09-05 for V0.",
    )
    model: str | None = Field(
        None,
        description="A model of engine.profile: the iteration becomes that profile's fitted GPU law a + d*batch "
        "(host_overhead_s and cuda_graphs unused; prefill tokens cost nothing beyond their iteration). Source: "
        "the profile's own data.",
    )
    latency: Literal["linear", "attention", "table"] = Field(
        "linear",
        description="The GPU step's latency law: linear = a + b*prefill + c*sum_ctx + d*batch (R^2 0.960); "
        "attention adds causal prefill attention over the cached context (R^2 0.997, max relative error 9.2%); "
        "table = measured step times interpolated, no fitted form (engine.latency_table; docs/engine.md). "
        "Source: design card (the linear law); H200 calibration (both fits, and the table's default rows).",
    )
    latency_table: str | None = Field(
        None,
        description="The measured step times of engine.latency: table, a JSON file in the calibration file's "
        "shape (latency_model.decode rows: batch, ctx, p50_ms; latency_model.prefill rows: tokens, p50_ms), "
        "relative to the scenario; null: the H200 calibration's rows. Unit: a path. Source: the scenario (a "
        "file of the user's measurements).",
    )
    kv_blocks: int | None = Field(
        None,
        ge=1,
        le=100_000_000,
        description="KV-cache pool of each sidecar (PagedAttention); null with gpu_memory_gb null: unlimited, no "
        "preemption. Unit: blocks. Source: the scenario.",
    )
    kv_block_size: int = Field(
        16, ge=1, le=1024, description="Tokens per KV block. Unit: tokens. Source: vLLM defaults."
    )
    kv_watermark: float = Field(
        0.01,
        ge=0,
        lt=1,
        description="Share of the pool kept free when admitting. Unit: fraction. Source: vLLM defaults "
        "(V0 BlockSpaceManager).",
    )
    gpu_memory_gb: float | None = Field(
        None,
        gt=0,
        le=10_000,
        description="GPU memory, from which the pool is derived as vLLM's profiler does (141 for an H200: "
        "52,852 blocks of 16 tokens). 1 GB = 1e9 B. Unit: GB. Source: GPU datasheets.",
    )
    gpu_memory_utilization: float = Field(
        0.9, gt=0, le=1, description="Share of GPU memory vLLM may use. Unit: fraction. Source: vLLM defaults."
    )
    model_layers: int = Field(
        32, ge=1, le=1024, description="Model layers. Unit: layers. Source: model shape (Llama-3-8B)."
    )
    model_kv_heads: int = Field(
        8, ge=1, le=1024, description="KV heads. Unit: heads. Source: model shape (Llama-3-8B)."
    )
    model_head_dim: int = Field(
        128,
        ge=1,
        le=4096,
        description="Dimension of a head (4096/32). Unit: elements. Source: model shape (Llama-3-8B).",
    )
    kv_dtype_bytes: int = Field(
        2, ge=1, le=8, description="Bytes per KV element (bf16). Unit: bytes. Source: model shape."
    )
    weights_gb: float = Field(
        16.06,
        ge=0,
        description="Model weights: 8.03e9 parameters x 2 bytes. Unit: GB. Source: model shape (Llama-3-8B).",
    )
    activation_gb: float = Field(
        0.0,
        ge=0,
        description="Activation memory vLLM's profiling pass reserves; set it from the engine's start-up log. "
        "Unit: GB. Source: assumption (no published figure for this shape).",
    )
    merge_memory: Literal["none", "always", "merge"] = Field(
        "none",
        description="Merge buffers on a same_gpu sidecar's GPU (params / hosts_per_island x (pseudo-gradient + "
        "checkpoint bytes per param)): none; always (held for the whole run, a smaller pool for good); merge "
        "(only while a merge runs: the pool shrinks, preempting if it must, and grows back). Source: design card "
        "(the merge's sizes).",
    )
    prefix_cache: int | None = Field(
        None,
        ge=0,
        le=10_000_000_000,
        description="Prefix cache of each sidecar: an LRU of whole 512-token blocks keyed by the requests' block "
        "hashes; hits skip prefill. With a KV pool its blocks are reserved out of it. null or 0: off. Unit: "
        "tokens. Source: traces (the Mooncake trace's 512-token blocks).",
    )
    preemption: Literal["recompute", "swap"] = Field(
        "recompute",
        description="How a KV pool preempts: recompute (vLLM V1's only mode: blocks freed, context recomputed) or "
        "swap (vLLM V0: a decoder's blocks go to host memory over the host's PCIe link, merge.pcie_gbps, and "
        "come back before it resumes). Source: vLLM (docs/engine.md).",
    )
    shared_prefix: SharedPrefix | None = Field(
        None,
        description="Block hashes for a synthetic workload's requests (traces bring their own); null: none. "
        "Source: the scenario.",
    )

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
        if self.latency_table is not None and self.latency != "table":
            raise ValueError("engine.latency_table holds the step times of engine.latency: table; set it too")
        if self.preemption != "recompute" and self.kv_blocks is None and self.gpu_memory_gb is None:
            raise ValueError("engine.preemption swap preempts KV blocks: give the pool (kv_blocks or gpu_memory_gb)")
        if self.merge_memory != "none" and self.kv_blocks is None and self.gpu_memory_gb is None:
            raise ValueError("engine.merge_memory takes KV blocks: give the pool (kv_blocks or gpu_memory_gb)")
        return self


class SLOConfig(Strict):
    """A request violates when any set threshold is exceeded: TTFT, TPOT, or (`e2e_s`, off by default)
    its end-to-end latency, which in a closed loop of batches is the batch's (the testbed's SLO)."""

    ttft_s: float | None = Field(
        1.0,
        gt=0,
        description="Time to first token; null: not tested. Unit: s. Source: design card (DistServe/Vidur range).",
    )
    tpot_s: float | None = Field(
        0.1,
        gt=0,
        description="Time per output token after the first; null: not tested. Unit: s. Source: design card "
        "(DistServe/Vidur range).",
    )
    e2e_s: float | None = Field(
        None,
        gt=0,
        description="End-to-end latency (the testbed's 1 s per request); null: not tested. Unit: s. Source: the "
        "paper's testbed (2.5).",
    )


class TrainingConfig(Strict):
    """The DiLoCo islands' inner steps and the model whose loss the progress heuristic tracks."""

    enabled: bool = Field(
        True,
        description="false: the fleet only serves: no inner step, no merge, nothing of training on any GPU, host, "
        "link or store (the policy is never asked). The 'no training' capacity of `wadiloco capacity` and "
        "`whatif` is a run with this off. Source: project choice (a what-if switch).",
    )
    step_time_s: float = Field(
        0.5, gt=0, description="Mean inner-step time of an island. Unit: s. Source: design card."
    )
    step_jitter: float = Field(
        0.05,
        ge=0,
        lt=1,
        description="Relative standard deviation of a step's time (Gaussian, per island stream). Unit: fraction. "
        "Source: design card (small jitter).",
    )
    params: float = Field(
        1.0e9,
        gt=0,
        le=1e13,
        description="Model parameters: sizes the merge's transfers and the loss curve. Unit: parameters. Source: "
        "design card (about 1B).",
    )
    tokens_per_step: float = Field(
        524288.0,
        gt=0,
        description="Tokens one island trains on per inner step (2^19). Unit: tokens. Source: assumption.",
    )
    initial_loss_tokens: float = Field(
        1.0e9,
        ge=0,
        description="Tokens seen before the run, where the loss curve starts. Unit: tokens. Source: assumption.",
    )


MERGE_PHASES = ("stage", "allreduce", "outer", "ckpt")  # the order a merge runs them in (sim.training)


class MergeConfig(Strict):
    """An outer merge: its corridor, its phases' sizes and rates, and the mitigations a training team
    can switch on (each default keeps the plain merge)."""

    h_min: int = Field(128, ge=1, description="Fewest inner steps between merges. Unit: steps. Source: design card.")
    h_max: int = Field(512, ge=1, description="Most inner steps between merges. Unit: steps. Source: design card.")
    phases: list[Literal[MERGE_PHASES]] = Field(
        list(MERGE_PHASES),
        description="Phases a merge runs, in this order; [] makes a merge instantaneous (the testbed: its "
        "merges are a co-tenant's windows). Source: design card.",
    )
    pseudo_grad_bytes_per_param: float = Field(
        2.0, gt=0, description="Pseudo-gradient size (bf16). Unit: bytes/parameter. Source: design card."
    )
    checkpoint_bytes_per_param: float = Field(
        8.0,
        gt=0,
        description="Checkpoint size: fp32 parameters and fp32 outer momentum. Unit: bytes/parameter. Source: "
        "design card.",
    )
    checkpoint_gbps: float = Field(
        80.0,
        gt=0,
        description="The global checkpoint store's aggregate write bandwidth (checkpoint_store global); every "
        "island writes its replica, sharded over its hosts. Unit: Gb/s. Source: assumption (a parallel filesystem "
        "faster than 8 writers).",
    )
    checkpoint_store: Literal["global", "per_island"] = Field(
        "global",
        description="global: one store behind the WAN core, so every island's checkpoint writes cross its uplink; "
        "per_island: a store in each island (region), reached through the island's switch, so they never leave "
        "the island. Source: project choice (a deployment choice).",
    )
    island_store_gbps: float = Field(
        80.0,
        gt=0,
        description="Each island's store's write bandwidth (checkpoint_store per_island), shared by that island's "
        "hosts. Unit: Gb/s. Source: assumption (as checkpoint_gbps).",
    )
    serialize_gbps: float = Field(
        5.6,
        gt=0,
        description="Checkpoint serialisation per thread: CPU work that presses the host for bytes / (rate x "
        "threads), separate from the write. torch.save of 4 GB, one thread: 0.64-0.79 GB/s. Unit: Gb/s. "
        "Source: H200 calibration (ckpt_GBps).",
    )
    serialize_threads: int = Field(
        1,
        ge=1,
        le=256,
        description="Threads serialising a host's shard, each pressing the host with weight 0.49. Unit: threads. "
        "Source: H200 calibration (one torch.save thread); the per-thread weight is an assumption.",
    )
    pcie_gbps: float = Field(
        440.0,
        gt=0,
        description="Each host's GPU to pinned-host staging link (55 GB/s). Unit: Gb/s. Source: H200 calibration "
        "(stage_GBps 55.1).",
    )
    outer_elements_per_s: float = Field(
        4.0e10,
        gt=0,
        description="fp32 Nesterov outer-step rate on one GPU: 81-83 steps of 2e9 elements in 4 s. Unit: "
        "elements/s. Source: H200 calibration (outer_steps).",
    )
    ring_step_latency_s: float = Field(
        1.06e-4,
        ge=0,
        le=10,
        description="Latency of one ring step of the all-reduce; a call takes 2(islands-1) steps (models/network/"
        "collective.py). Unit: s. Source: the measured DiLoCo cluster (its NCCL curve, docs/network.md).",
    )
    allreduce_calls: int = Field(
        1,
        ge=1,
        le=1_000_000,
        description="Collective calls per synchronisation, each paying the ring's latency: 1 for one staged "
        "buffer (the measured DiLoCo runs made about 49, per tensor). Unit: calls. Source: the measured "
        "DiLoCo cluster (docs/network.md); 1 is a project choice.",
    )
    allreduce_setup_s: float = Field(
        0.0,
        ge=0,
        le=3600,
        description="One-off cost of a run's first all-reduce (communicator set-up: 0.72 s on the measured "
        "cluster's cold start; 0 where a scenario is a window of a running job). Unit: s. Source: "
        "the measured DiLoCo cluster (docs/network.md).",
    )
    checkpoint_mode: Literal["sync", "async"] = Field(
        "sync",
        description="sync: the merge waits for serialisation and the write; async (PyTorch DCP async_save): it "
        "blocks only while the shard is staged over PCIe, serialisation and the write run behind. Source: "
        "checkpointing (PyTorch blogs 2024, 2025).",
    )
    checkpoint_stagger: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="At most this many hosts serialise and write at once, the rest queue; null: all at once. "
        "Unit: hosts. Source: a scheduling choice.",
    )
    fragments: int = Field(
        1,
        ge=1,
        le=256,
        description="Streaming DiLoCo: the model in this many fragments, each synchronised on its own staggered "
        "schedule; 1: no streaming. Unit: fragments. Source: DiLoCo variants (Streaming DiLoCo).",
    )
    fragment_offset_steps: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="Inner steps between one fragment's synchronisation and the next's; null: h_min // "
        "fragments. Unit: steps. Source: DiLoCo variants (Streaming DiLoCo's H/P staggering).",
    )
    compression: Literal["none", "int8", "int4"] = Field(
        "none",
        description="Pseudo-gradients all-reduced as int8 (1 byte/param) or 4-bit (0.5), for a quantise and a "
        "dequantise pass over the shard. Source: DiLoCo variants (INTELLECT-1; Streaming DiLoCo).",
    )
    compression_on: Literal["gpu", "host"] = Field(
        "gpu",
        description="Where the codec passes run: the outer step's GPU or the host CPU. Source: DiLoCo variants.",
    )
    compress_gpu_elements_per_s: float = Field(
        4.0e10,
        gt=0,
        description="Codec rate on the GPU. Unit: elements/s. Source: assumption (as fast as the fp32 outer step).",
    )
    compress_host_elements_per_s: float = Field(
        2.5e8,
        gt=0,
        description="Codec rate on the host CPU (about 1 GB/s of fp32 per core). Unit: elements/s. Source: assumption.",
    )

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
    """Processor-sharing weights of merge work against one serving iteration (weight 1): with work of
    weight w on a resource, serving keeps 1/(1+w) of it. `null` means: fit from the packaged H200
    calibration (models.training.interference; `wadiloco calibrate` prints the fit)."""

    gpu_outer_weight: float | None = Field(
        None,
        ge=0,
        description="The outer step on a GPU serving shares; null: fitted, 1.343. Unit: weight. Source: H200 "
        "calibration (outer rows of graph decode and prefill).",
    )
    gpu_inner_weight: float | None = Field(
        None,
        gt=0,
        description="An inner training step on a GPU serving shares (fleet.gpu_sharing timeslice or mps); null: "
        "gpu_outer's fit. The testbed's matmul co-tenant fits 0.55-1.27. Unit: weight. Source: H200 calibration "
        "(outer row); the paper's testbed (6) for the alternative.",
    )
    gpu_stage_weight: float | None = Field(
        None,
        ge=0,
        description="Staging copies on the GPU; null: fitted, 0.013. Unit: weight. Source: H200 calibration (stage "
        "rows).",
    )
    host_ckpt_weight: float | None = Field(
        None,
        ge=0,
        description="Checkpoint serialisation on the host CPU, per thread; null: fitted, 0.488. Unit: weight. "
        "Source: H200 calibration (eager decode, ckpt row).",
    )
    host_stage_weight: float | None = Field(
        None,
        ge=0,
        description="Staging on the host CPU; null: fitted, 0.042. Unit: weight. Source: H200 calibration (eager "
        "decode, stage row).",
    )


# ---- on/off timetables (models.timetables; built by kind in models.cotenant) and the GPU co-tenant ----
# Times are seconds of simulated time, which is the testbed's serving time (0 = its `start`).


class PeriodicTimetable(Strict):
    """On when (t + phase_s) mod period_s <= window_s (`<` unless inclusive): Stage 10's sync windows."""

    kind: Literal["periodic"] = Field(description="Selects this timetable. Source: the paper's testbed (3.3).")
    period_s: float = Field(gt=0, description="Period (37 in Stage 10). Unit: s. Source: the paper's testbed (3.3).")
    window_s: float = Field(
        ge=0,
        description="Window at the start of each period (8 in Stage 10). Unit: s. Source: the paper's testbed (3.3).",
    )
    phase_s: float = Field(0.0, ge=0, description="Shift of the schedule. Unit: s. Source: the paper's testbed (3.3).")
    inclusive: bool = Field(
        True, description="On at exactly window_s too (`<=`, as the testbed). Source: the paper's testbed (3.3)."
    )


class PressureTimetable(Strict):
    """On while the testbed's pressure schedule is high: max(network, inference, checkpoint) >= threshold."""

    kind: Literal["pressure"] = Field(description="Selects this timetable. Source: the paper's testbed (3.2).")
    period_s: float = Field(
        90.0, gt=0, description="Period of the pressure sinusoid. Unit: s. Source: the paper's testbed (3.2)."
    )
    threshold: float = Field(
        0.6,
        ge=0,
        le=1,
        description="Pressure at which the schedule counts as high. Unit: pressure. Source: the paper's testbed (2.6).",
    )


class BurstyTimetable(Strict):
    """On while (t + phase_s) mod period_s < window_s (strict): the bursty profile's busy test."""

    kind: Literal["bursty"] = Field(description="Selects this timetable. Source: the paper's testbed (2.4).")
    period_s: float = Field(120.0, gt=0, description="Burst period. Unit: s. Source: the paper's testbed (2.4).")
    window_s: float = Field(
        30.0, ge=0, description="Busy window at the start of each period. Unit: s. Source: the paper's testbed (2.4)."
    )
    phase_s: float = Field(0.0, ge=0, description="Shift of the schedule. Unit: s. Source: the paper's testbed (2.4).")


class WindowsTimetable(Strict):
    """Windows [s, s + window_s] at explicit starts: a list, or a file (one number per line, or a
    coordinator JSONL log; path relative to the scenario). With `repeat`, time wraps mod D as the
    replay's --sync-events-repeat did, D = `repeat_s` or the trace's own length."""

    kind: Literal["windows"] = Field(description="Selects this timetable. Source: the paper's testbed (3.4).")
    starts: list[Annotated[float, Field(ge=0)]] | None = Field(
        None, description="Window starts; give this or file. Unit: s. Source: the scenario."
    )
    file: str | None = Field(
        None,
        description="A file of starts, relative to the scenario: one number per line, or a coordinator JSONL log "
        "(merged minus coordinator_start). Source: the paper's testbed (3.4).",
    )
    window_s: float = Field(8.0, ge=0, description="Length of each window. Unit: s. Source: the paper's testbed (3.4).")
    repeat: bool = Field(
        True, description="Wrap time mod the trace length D when D > window_s. Source: the paper's testbed (3.4)."
    )
    repeat_s: float | None = Field(
        None,
        gt=0,
        description="The trace length D the wrap uses; null: the file's last record, or the last start + window_s. "
        "Unit: s. Source: the paper's testbed (3.4).",
    )

    @model_validator(mode="after")
    def _one_source(self):
        if (self.starts is None) == (self.file is None):
            raise ValueError("give exactly one of `starts` (a list) and `file`")
        return self


class MergesTimetable(Strict):
    """A window of window_s after each merge of the run's own trainer ends."""

    kind: Literal["merges"] = Field(description="Selects this timetable. Source: the paper's testbed (3.4).")
    window_s: float = Field(
        8.0, ge=0, description="Length of the window after each merge ends. Unit: s. Source: the paper's testbed (3.4)."
    )


class NoTimetable(Strict):
    """Never on (the testbed's stress mode `off`)."""

    kind: Literal["none"] = Field(description="Selects this timetable. Source: the paper's testbed (3.1).")


class UnionTimetable(Strict):
    """On while any of `of` is on (Stage 10's `both`: pressure or periodic sync)."""

    kind: Literal["union"] = Field(description="Selects this timetable. Source: the paper's testbed (3.1).")
    of: list[TimetableSpec] = Field(
        min_length=1, description="The timetables combined. Source: the paper's testbed (3.1)."
    )


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

    timetable: TimetableSpec = Field(
        description="When the co-tenant computes (a timetable, by `kind`). Source: the paper's testbed (3.7)."
    )
    weight: float | None = Field(
        None,
        gt=0,
        le=1000,
        description="Its processor-sharing weight on the GPU; give this or profile_entry. Unit: weight. Source: "
        "the scenario.",
    )
    profile_entry: str | None = Field(
        None,
        description="A co-tenant of engine.profile whose weight is fitted from its runs (matmul_6144x20: 0.551). "
        "Source: the paper's testbed (6).",
    )
    sidecars: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, description="Sidecar indices it runs beside; null: all. Source: the scenario."
    )
    poll_s: float = Field(
        0.05,
        ge=0,
        le=60,
        description="The stress loop's idle poll: it switches on at the first tick at or after a window opens; 0: "
        "exactly when it opens. Unit: s. Source: the paper's testbed (3.1).",
    )

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

    prefill_sidecars: list[Annotated[int, Field(ge=0)]] = Field(
        [0],
        min_length=1,
        description="Fleet indices of the sidecars that only prefill; every other sidecar decodes. Source: the "
        "scenario.",
    )
    kv_bytes_per_token: int | None = Field(
        None,
        ge=1,
        le=1 << 30,
        description="KV moved per prompt token; null: the engine's model shape, 2 x 32 x 8 x 128 x 2 = 131072 "
        "(128 KiB, Llama-3-8B in bf16). Unit: bytes/token. Source: model shape.",
    )

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

    kv_bytes_per_token: int | None = Field(
        None,
        ge=1,
        le=1 << 30,
        description="KV fetched per cached token; null: the engine's model shape, 128 KiB for Llama-3-8B in bf16. "
        "Unit: bytes/token. Source: model shape.",
    )


class LabelsConfig(Strict):
    """Testbed labels on every request, read at its start (the batch start of a closed loop):
    `sync_active` from the `sync` timetable; with `pressure`, also `max_pressure` (the schedule's
    values, or the bursty labels 0.95 busy / 0.20 quiet) and `high_pressure` (max >= 0.6)."""

    sync: TimetableSpec = Field(
        MergesTimetable(kind="merges"),
        description="The timetable that sets each request's sync_active label. Source: the paper's testbed (2.6).",
    )
    pressure: Annotated[PressureTimetable | BurstyTimetable, Field(discriminator="kind")] | None = Field(
        None,
        description="The schedule that sets max_pressure and high_pressure; null: no pressure labels. Source: the "
        "paper's testbed (2.6).",
    )


# Scenario blocks a plug-in resolves into an extra of the run's result (models.results.blocks):
# `testbed_labels`, by the testbed plug-in (models/testbed/plugin.py). One set with no plug-in for it
# is an input error.
PLUGIN_BLOCKS = ("testbed_labels",)


class PolicyConfig(Strict):
    """The merge policy a run uses (`wadiloco policies` lists them with their parameters)."""

    name: str = Field("fixed", description="A registered merge policy. Source: design card (the policies).")
    params: dict[str, Any] = Field(
        {}, description="The policy's parameters, checked against its own schema. Source: the policy."
    )


class RouterConfig(Strict):
    """The router in front of the sidecars (models/routers; `wadiloco routers` lists them): `static`
    keeps the workload's own dealing (workload.spread) and runs no router."""

    name: str = Field("static", description="A registered router; static: no router. Source: the simulator's design.")
    params: dict[str, Any] = Field(
        {}, description="The router's parameters, checked against its own schema. Source: the router."
    )


class MonitorConfig(Strict):
    """What the fleet's observer samples and what the policies see."""

    pressure_window_s: float = Field(
        30.0,
        gt=0,
        description="The window the pressures a policy observes are averaged over. Unit: s. Source: project choice.",
    )
    sample_s: float = Field(
        1.0, gt=0, description="Timeline sampling period (one row per sample). Unit: s. Source: project choice."
    )
    check_invariants: bool = Field(
        False,
        description="Check the invariants at the end of the run (as --check, or WADILOCO_CHECK_INVARIANTS=1). "
        "Source: docs/invariants.md.",
    )


class Scenario(Strict):
    """One run's whole configuration; every block has its defaults."""

    name: str = Field("scenario", description="Name shown in reports and result rows. Source: the scenario.")
    description: str = Field("", description="Free text shown in reports. Source: the scenario.")
    horizon_s: float = Field(
        600.0,
        gt=0,
        le=7 * 86400,
        description="Requests arrive and training runs for this long. Unit: s. Source: the paper's testbed "
        "(2.5: 600-s runs).",
    )
    drain_s: float = Field(
        120.0,
        ge=0,
        le=7 * 86400,
        description="Time after the horizon for in-flight requests to finish, with no new arrivals; a request "
        "still unfinished counts as a violation. Unit: s. Source: project choice.",
    )
    fleet: FleetConfig = Field(FleetConfig(), description="The hardware and how it is shared. Source: design card.")
    engine: EngineConfig = Field(EngineConfig(), description="Each sidecar's serving engine. Source: vLLM defaults.")
    slo: SLOConfig = Field(SLOConfig(), description="The serving SLO. Source: design card.")
    training: TrainingConfig = Field(TrainingConfig(), description="The DiLoCo islands' training. Source: design card.")
    merge: MergeConfig = Field(MergeConfig(), description="The outer merge and its mitigations. Source: design card.")
    interference: InterferenceConfig = Field(
        InterferenceConfig(), description="Weights of merge work on shared resources. Source: H200 calibration."
    )
    workload: dict[str, Any] = Field(
        {"kind": "normal"},
        description="The serving load: `kind` (a registered workload kind) and its parameters, checked against "
        "that kind's schema (the workload kinds below). Source: design card (the regimes).",
    )
    policy: PolicyConfig = Field(PolicyConfig(), description="The merge policy. Source: design card.")
    router: RouterConfig = Field(
        RouterConfig(), description="The router in front of the sidecars. Source: the simulator's design."
    )
    monitor: MonitorConfig = Field(MonitorConfig(), description="The fleet's observer. Source: project choice.")
    cotenant: CotenantConfig | None = Field(
        None, description="A process computing on the serving GPU; null: none. Source: the paper's testbed (3.1)."
    )
    testbed_labels: LabelsConfig | None = Field(
        None, description="The testbed's per-request labels; null: none. Source: the paper's testbed (2.6)."
    )
    disagg: DisaggConfig | None = Field(
        None,
        description="Disaggregated prefill/decode; null: every sidecar prefills and decodes its own requests. "
        "Source: serving systems (DistServe, Splitwise, Mooncake: the mechanism).",
    )
    remote_kv: RemoteKVConfig | None = Field(
        None,
        description="The sidecars' prefix caches as one pool; null: a sidecar reads only its own. Source: "
        "serving systems (Mooncake, LMCache: the mechanism).",
    )
    base_dir: str = Field(
        ".",
        exclude=True,
        description="Where relative paths (traces) resolve from: the scenario file's folder. Not a YAML field.",
    )
    source: str = Field("<scenario>", exclude=True, description="The file the scenario came from. Not a YAML field.")

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
    "engine.latency_table",
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
    "merge.checkpoint_store",
    "merge.island_store_gbps",
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
    "training.enabled",
)


@lru_cache(maxsize=1)
def _default_dump() -> dict:
    return Scenario().model_dump(mode="json")
