"""Processor-sharing weights of merge work, fitted from the single-phase H200 measurements.

The simulator has no slowdown rule. A serving iteration needs GPU work g and host (CPU) work h,
which run side by side (the CPU launches while the GPU runs), so an uncontended iteration takes
max(h, g). Merge phases are jobs on the same shared resources; a resource splits its capacity
between the jobs on it in proportion to their weights (a serving iteration has weight 1).
A weight says how hard a kind of merge work presses on a resource compared with one serving
iteration: with an outer step of weight w on the GPU, serving gets 1/(1+w) of it.

Fitting (one number per phase and resource, from `interference.<mode>.<phase>.p50_ratio`):
- GPU, outer step: graph decode and prefill are GPU-bound, ratio = 1 + w; w is the geometric mean
  of the two (ratio - 1) values' ratios, i.e. 1+w = sqrt(r_decode * r_prefill).
- GPU, staging: same, from the `stage` phase (DMA copies steal a little HBM/copy-engine time).
- Host, checkpoint and staging: eager decode is CPU-launch bound (h > g), so its ratio is 1 + w.
- GPU, inner training step: the outer step's weight (a saturating co-tenant of the same GPU).
The `all` phase (stage + outer + ckpt together) and the eager outer step are not used by the fit;
tests hold them out as validation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from wadiloco.models.engine.latency import load_calibration

GRAPH = "decode_graph_b64_ctx1024"
EAGER = "decode_eager_b64_ctx1024"
PREFILL = "prefill_graph_2048"


@dataclass(frozen=True)
class InterferenceWeights:
    gpu_outer: float
    gpu_stage: float
    host_ckpt: float
    host_stage: float
    eager_host_s: float  # CPU time per eager decode iteration (launch-bound), from the baseline
    graph_gpu_s: float  # GPU time of the measured decode iteration (B=64, ctx=1024)
    # An inner training step on a shared GPU (fleet.gpu_sharing: timeslice/mps). The `outer` row is the
    # calibration's saturating co-tenant on the same H200 and serving model, so its fit is the default;
    # the testbed's Stage 10 matmul co-tenant (B200, Qwen2.5) fits 0.55-1.27 (models.cotenant), which a
    # scenario can set as interference.gpu_inner_weight.
    gpu_inner: float = 0.0


def fit_weights(cal: dict | None = None) -> InterferenceWeights:
    cal = cal if cal is not None else load_calibration()
    inter = cal["interference"]

    def ratio(mode: str, phase: str) -> float:
        return float(inter[mode][phase]["p50_ratio"])

    gpu_outer = math.sqrt(ratio(GRAPH, "outer") * ratio(PREFILL, "outer")) - 1.0
    gpu_stage = max(0.0, math.sqrt(ratio(GRAPH, "stage") * ratio(PREFILL, "stage")) - 1.0)
    host_ckpt = max(0.0, ratio(EAGER, "ckpt") - 1.0)
    host_stage = max(0.0, ratio(EAGER, "stage") - 1.0)
    return InterferenceWeights(
        gpu_outer=gpu_outer,
        gpu_stage=gpu_stage,
        host_ckpt=host_ckpt,
        host_stage=host_stage,
        eager_host_s=inter[EAGER]["baseline"]["p50_ms"] / 1e3,
        graph_gpu_s=inter[GRAPH]["baseline"]["p50_ms"] / 1e3,
        gpu_inner=gpu_outer,
    )


@lru_cache(maxsize=1)
def default_weights() -> InterferenceWeights:
    return fit_weights()


def measured_ratio(mode: str, phase: str, stat: str = "p50_ratio") -> float:
    return float(load_calibration()["interference"][mode][phase][stat])
