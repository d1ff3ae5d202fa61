"""The physics latency law: a step's GPU time from its composition and the model's and GPU's figures,
with a handful of efficiencies shared by every model and GPU (docs/serving_validation.md).

Per GPU of a tensor-parallel group of `tp` (weights, heads and KV heads sharded over it), a step of
`pf` prefill tokens in `m` chunks (causal pairs `pairs`, past tokens `past`) and `n_dec` decodes
(summed context `sum_ctx`, the new token included) has T = pf + n_dec tokens through the GEMMs and
rows = m + n_dec rows through the LM head:

    dense     t_c = (2 A L T + 2 V h rows) / tp / (eta_f F)                      GEMM FLOPs
              t_w = (L D + V h) b / tp / (eta_b BW) + L E_hit(T) X b / tp / (eta_moe BW)
              t_dense = (t_c^p + t_w^p)^(1/p)                                      a smooth roofline
    attention kv (sum_ctx + past + T) / (eta_b BW)                                 KV read and written
              + 4 d H L pairs / tp / (eta_f F) + 4 d H L sum_ctx / tp / (eta_dattn F)
    all-reduce (2L + 2) 2(tp - 1) (t_ar + T h b / tp / (link / 2))               a ring, tp > 1
    fixed     t_step + L t_layer

A: a layer's active parameters (a mixture of experts: its dense part and k experts), D: its dense
part, X: one expert's, E_hit(T) = E (1 - (1 - k/E)^T) the experts T tokens touch (uniform top-k
routing), L layers, h hidden size, V vocabulary, d head dim, H query heads, b bytes per weight, kv the
KV bytes per token per GPU; F, BW, link: the GPU's peak dense bf16 FLOP/s, HBM bandwidth and GPU-GPU
link (both directions). Decode attention's QK and PV are GEMV-shaped and run at a small fraction of
peak (eta_dattn) on top of their KV read. `t_api`, per request on the client's and API server's path,
is not a step's: the engine adds it to each request's latency.

A run of pure-decode steps has T, rows and the weights fixed and every other term linear in the summed
context, so step i takes exactly g0 + i*dg (`decode_line`) and the engine times runs in closed form.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from importlib import resources

from wadiloco.models.engine.catalog import GPU, ModelShape

try:  # the engine's latency-law interface (models.engine.laws)
    from wadiloco.models.engine.laws import LatencyLaw
except ImportError:  # (until that seam lands: the interface's attributes, nothing else)

    class LatencyLaw:  # type: ignore[no-redef]
        __slots__ = ("line", "detail")

        def __eq__(self, other) -> bool:
            return type(other) is type(self) and other.args() == self.args()

        def __hash__(self) -> int:
            return hash((type(self).__name__, self.args()))


COEFFICIENTS_FILE = "physics_law.json"


@dataclass(frozen=True)
class Coefficients:
    """The law's shared coefficients (module docstring): efficiencies are fractions of the GPU's peak."""

    eta_f: float  # GEMMs and prefill attention, of peak dense bf16 FLOP/s
    eta_b: float  # streamed reads (weights, KV), of peak HBM bandwidth
    eta_dattn: float  # decode attention's QK and PV, of peak dense bf16 FLOP/s
    eta_moe: float  # fused-MoE expert reads, of peak HBM bandwidth
    p: float  # the dense roofline's smoothness: 1 adds compute and memory, large p takes the larger
    t_step: float  # s per step (sampling, input preparation: the engine work async scheduling leaves)
    t_layer: float  # s per layer per step (norms, rotary, activation, residual kernels)
    t_ar: float  # s per ring hop of an all-reduce (tp > 1)
    t_api: float  # s per request on the client's and API server's path (added to TTFT and E2E)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@lru_cache(maxsize=1)
def fitted() -> dict:
    """The packaged fit (models/data/physics_law.json): coefficients, their standard errors, the rows that
    pin each, how they were fitted and how well."""
    return json.loads(resources.files("wadiloco.models.data").joinpath(COEFFICIENTS_FILE).read_text())


def default_coefficients() -> Coefficients:
    c = fitted()["coefficients"]
    return Coefficients(**{n: float(c[n]["value"]) for n in Coefficients.names()})


class PhysicsLaw(LatencyLaw):
    """The law for one (model, GPU, tensor parallelism), with coefficients `c`. `bench`: the H200
    micro-benchmark's steps instead of an engine's (`bench_law`)."""

    __slots__ = ("shape", "gpu", "tp", "c", "bench", "_k")

    def __init__(self, shape: ModelShape, gpu: GPU, tp: int, c: Coefficients, bench: bool = False) -> None:
        if tp < 1 or shape.heads % tp:
            raise ValueError(f"tensor parallelism {tp} must divide the model's {shape.heads} attention heads")
        self.shape, self.gpu, self.tp, self.c, self.bench = shape, gpu, tp, c, bench
        self.line = True
        self.detail = True
        self._k = _constants(shape, gpu, tp, c, bench)

    def args(self) -> tuple:
        return self.shape, self.gpu, self.tp, self.c, self.bench

    def __reduce__(self):  # (sweep workers and caches pickle a run's spec)
        return PhysicsLaw, self.args()

    def dense(self, tokens: float, rows: float) -> float:
        """The GEMMs' time: their FLOPs and the weights they read, combined by the p-norm."""
        fix, f_tok, f_row, w_dense, w_expert, experts, keep, ctx_cost, kv, kv_new, f_pair, p, ar_hop, ar_tok = self._k
        tc = f_tok * tokens + f_row * rows
        tw = w_dense + (w_expert * experts * (1.0 - keep**tokens) if experts and tokens > 0 else 0.0)
        hi, lo = (tc, tw) if tc > tw else (tw, tc)
        return hi * (1.0 + (lo / hi) ** p) ** (1.0 / p) if lo > 0 else hi

    def time(self, pf: float, m: float, pairs: float, past: float, n_dec: float, sum_ctx: float) -> float:
        """step_time in floats (mean compositions: `saturated`)."""
        fix, f_tok, f_row, w_dense, w_expert, experts, keep, ctx_cost, kv, kv_new, f_pair, p, ar_hop, ar_tok = self._k
        tokens = pf + n_dec
        t = fix + self.dense(tokens, m + n_dec) + ctx_cost * sum_ctx + kv * past + kv_new * tokens + f_pair * pairs
        return t + ar_hop + ar_tok * tokens if ar_hop else t

    def step_time(self, pf: int, m: int, pairs: int, past: int, n_dec: int, sum_ctx: int) -> float:
        return self.time(pf, m, pairs, past, n_dec, sum_ctx)

    def decode_line(self, n_dec: int, sum_ctx: int) -> tuple[float, float]:
        return self.time(0, 0, 0, 0, n_dec, sum_ctx), n_dec * self._k[
            7
        ]  # (ctx_cost: each decode's context grows by one)

    def saturated(self, batch: float, prompt: float, output: float, prefill: float) -> float:
        """A saturated engine's mean step: `batch` decoders at mean context prompt + output/2, `prefill`
        tokens in batch/output chunks (prompts start at that rate), a whole prompt's causal pairs each."""
        starts = batch / output
        pairs = starts * prompt * (prompt + 1) / 2
        return self.time(prefill, starts, pairs, 0.0, batch, batch * (prompt + output / 2))

    def breakdown(self, pf: int, m: int, pairs: int, past: int, n_dec: int, sum_ctx: int) -> dict[str, float]:
        """The step's time by term (s): fixed, dense, attention, all-reduce (they add to step_time)."""
        fix, f_tok, f_row, w_dense, w_expert, experts, keep, ctx_cost, kv, kv_new, f_pair, p, ar_hop, ar_tok = self._k
        tokens = pf + n_dec
        attention = ctx_cost * sum_ctx + kv * past + kv_new * tokens + f_pair * pairs
        comm = ar_hop + ar_tok * tokens if ar_hop else 0.0
        return {"fixed": fix, "dense": self.dense(tokens, m + n_dec), "attention": attention, "allreduce": comm}


def _constants(shape: ModelShape, gpu: GPU, tp: int, c: Coefficients, bench: bool) -> tuple:
    """The per-step, per-token and per-row costs in seconds (PhysicsLaw._k, in this order)."""
    s, b, L = shape, shape.dtype_bytes, shape.layers
    flops, bw = c.eta_f * gpu.flops, c.eta_b * gpu.hbm_bw
    head = 0 if bench else s.head_params  # the bench runs the layers' GEMMs only
    f_tok = 2.0 * s.active_params_layer * L / tp / flops
    f_row = 2.0 * head / tp / flops
    w_dense = (L * s.dense_params_layer + head) * b / tp / bw
    w_expert = L * s.expert_params * b / tp / (c.eta_moe * gpu.hbm_bw)  # one expert in every layer
    keep = 1.0 - s.experts_per_tok / s.experts if s.experts else 1.0  # a token misses a given expert
    kv = s.kv_bytes_per_gpu_token(tp) / bw
    f_pair = 4.0 * s.head_dim * s.heads * L / tp / flops  # QK and PV per (query, key) pair
    ctx_cost = kv if bench else kv + 4.0 * s.head_dim * s.heads * L / tp / (c.eta_dattn * gpu.flops)
    fix = L * c.t_layer + (0.0 if bench else c.t_step)
    n_ar, hops = 2 * L + 2, 2 * (tp - 1)
    ar_hop = n_ar * hops * c.t_ar if tp > 1 else 0.0
    ar_tok = n_ar * hops * s.hidden * b / tp / (gpu.link_bw / 2) if tp > 1 else 0.0
    kv_new = 0.0 if bench else kv  # the new tokens' KV written (the bench writes none)
    return fix, f_tok, f_row, w_dense, w_expert, s.experts, keep, ctx_cost, kv, kv_new, f_pair, c.p, ar_hop, ar_tok


def coefficients_dict(c: Coefficients) -> dict[str, float]:
    return asdict(c)


def bench_law(c: Coefficients) -> PhysicsLaw:
    """The law on the H200 micro-benchmark's steps (docs/sources.md, H200 calibration): a Llama-3-8B's
    layer GEMMs alone (no LM head, no KV written, no engine around them: t_step out), a decode step's KV
    one streamed read (a GEMV: at eta_b, no attention FLOPs), a prefill step causal attention."""
    from wadiloco.models.engine.catalog import gpu, model

    return PhysicsLaw(model("Llama-3-8B"), gpu("H200"), 1, c, bench=True)


def bench_rows(c: Coefficients, cal: dict | None = None) -> tuple[list[tuple[str, float, float]], float]:
    """(row, measured s, law s) for the H200 calibration's 19 p50 rows, and R^2 of the law on them."""
    from wadiloco.models.engine.latency import load_calibration

    cal = cal if cal is not None else load_calibration()
    law, rows = bench_law(c), []
    for r in cal["latency_model"]["decode"]:
        B = r["batch"]
        rows.append((f"decode B={B} ctx={r['ctx']}", r["p50_ms"] / 1e3, law.step_time(0, 0, 0, 0, B, B * r["ctx"])))
    for r in cal["latency_model"]["prefill"]:
        T = r["tokens"]
        rows.append((f"prefill T={T}", r["p50_ms"] / 1e3, law.step_time(T, 1, T * (T + 1) // 2, 0, 0, 0)))
    ys = [y for _, y, _ in rows]
    mean = sum(ys) / len(ys)
    ss_res = sum((y - t) ** 2 for _, y, t in rows)
    return rows, 1.0 - ss_res / sum((y - mean) ** 2 for y in ys)
