"""Scenario schema: every field a YAML may set, its unit, default and source.

Only the shape of a scenario lives here (pydantic models, unknown keys rejected); loading a file
and checking the workload and policy against their registries is `models.config`. Bandwidths are
in Gb/s (gigabits per second) throughout; sizes in bytes; times in seconds.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import Field, model_validator

from wadiloco.models.schema import Strict


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
    wan_efficiency: float = Field(0.6, gt=0, le=1)
    # What-if switches: a resource named here has unlimited capacity (no queueing on it).
    unlimited: list[Literal["gpu", "host", "pcie", "nic", "links", "storage"]] = []

    @property
    def n_hosts(self) -> int:
        return self.islands * self.hosts_per_island

    @property
    def n_sidecars(self) -> int:
        return self.n_hosts * self.sidecars_per_host


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

    @model_validator(mode="after")
    def _budget_holds_a_decode_step(self):
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least "
                f"max_num_seqs ({self.max_num_seqs}), as in vLLM: every running sequence decodes "
                "one token per step"
            )
        return self


class SLOConfig(Strict):
    """DistServe/Vidur-range thresholds."""

    ttft_s: float = Field(1.0, gt=0)
    tpot_s: float = Field(0.1, gt=0)


class TrainingConfig(Strict):
    step_time_s: float = Field(0.5, gt=0)
    step_jitter: float = Field(0.05, ge=0, lt=1, description="relative std-dev of a step's time")
    params: float = Field(1.0e9, gt=0, le=1e13)
    tokens_per_step: float = Field(524288.0, gt=0, description="per island")
    initial_loss_tokens: float = Field(1.0e9, ge=0, description="tokens seen before the run")


class MergeConfig(Strict):
    h_min: int = Field(128, ge=1)
    h_max: int = Field(512, ge=1)
    pseudo_grad_bytes_per_param: float = Field(2.0, gt=0, description="bf16")
    checkpoint_bytes_per_param: float = Field(8.0, gt=0, description="fp32 params + fp32 outer momentum")
    # Every island writes its replica, sharded over its hosts (per-island restart).
    checkpoint_gbps: float = Field(80.0, gt=0, description="aggregate store write bandwidth")
    serialize_gbps: float = Field(5.6, gt=0, description="per-host checkpoint serialisation")
    pcie_gbps: float = Field(440.0, gt=0, description="per-host GPU<->pinned host staging")
    outer_elements_per_s: float = Field(4.0e10, gt=0, description="fp32 Nesterov update rate, one GPU")

    @model_validator(mode="after")
    def _corridor(self):
        if self.h_min > self.h_max:
            raise ValueError(f"h_min ({self.h_min}) must not exceed h_max ({self.h_max})")
        return self


class InterferenceConfig(Strict):
    """Processor-sharing weights of merge work against one serving iteration (weight 1).

    `null` means: fit from ../shared/calibration (models.interference)."""

    gpu_outer_weight: float | None = Field(None, ge=0)
    gpu_stage_weight: float | None = Field(None, ge=0)
    host_ckpt_weight: float | None = Field(None, ge=0)
    host_stage_weight: float | None = Field(None, ge=0)


class PolicyConfig(Strict):
    name: str = "fixed"
    params: dict[str, Any] = {}


class MonitorConfig(Strict):
    pressure_window_s: float = Field(30.0, gt=0)
    sample_s: float = Field(1.0, gt=0, description="timeline sampling period")
    check_invariants: bool = False


class Scenario(Strict):
    name: str = "scenario"
    description: str = ""
    horizon_s: float = Field(600.0, gt=0, le=7 * 86400)
    drain_s: float = Field(120.0, ge=0, description="time after the horizon to finish in-flight requests")
    fleet: FleetConfig = FleetConfig()
    engine: EngineConfig = EngineConfig()
    slo: SLOConfig = SLOConfig()
    training: TrainingConfig = TrainingConfig()
    merge: MergeConfig = MergeConfig()
    interference: InterferenceConfig = InterferenceConfig()
    workload: dict[str, Any] = {"kind": "normal"}
    policy: PolicyConfig = PolicyConfig()
    monitor: MonitorConfig = MonitorConfig()
    # Where relative paths (traces) resolve from: the scenario file's folder. Not a YAML field.
    base_dir: str = Field(".", exclude=True)
    source: str = Field("<scenario>", exclude=True)

    def digest(self) -> str:
        """Stable hash of everything that changes results."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]
