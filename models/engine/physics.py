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
is not a step's: the engine adds it to each request's latency. The coefficients (`c`,
models.engine.physics_fit.Coefficients) are fitted once for every model and GPU (physics_fit).

A run of pure-decode steps has T, rows and the weights fixed and every other term linear in the summed
context, so step i takes exactly g0 + i*dg (`decode_line`) and the engine times runs in closed form.
"""

from __future__ import annotations

from wadiloco.models.engine.catalog import GPU, ModelShape
from wadiloco.models.engine.laws import LatencyLaw


class PhysicsLaw(LatencyLaw):
    """The law for one (model, GPU, tensor parallelism), with coefficients `c`. `bench`: the H200
    micro-benchmark's steps instead of an engine's (models.engine.physics_fit.bench_law). Its costs, in
    seconds: per step (`fix`), per token through the GEMMs (`f_tok`) and per LM-head row (`f_row`), the
    weights' read (`w_dense`; `w_expert` per expert in every layer, `experts` of them, a token missing a
    given one with probability `keep`), per context token of a decode (`ctx_cost`: its KV read and
    attention FLOPs), per past token of a chunk (`kv`) and per new token written (`kv_new`), per causal
    pair (`f_pair`), per step and per token of the all-reduces (`ar_hop`, `ar_tok`)."""

    __slots__ = ("shape", "gpu", "tp", "c", "bench", "fix", "f_tok", "f_row", "w_dense", "w_expert", "experts")
    __slots__ += ("keep", "ctx_cost", "kv", "kv_new", "f_pair", "p", "ar_hop", "ar_tok")

    def __init__(self, shape: ModelShape, gpu: GPU, tp: int, c, bench: bool = False) -> None:
        if tp < 1 or shape.heads % tp:
            raise ValueError(f"tensor parallelism {tp} must divide the model's {shape.heads} attention heads")
        self.shape, self.gpu, self.tp, self.c, self.bench = shape, gpu, tp, c, bench
        self.line = True
        self.detail = True
        s, b, L = shape, shape.dtype_bytes, shape.layers
        flops, bw = c.eta_f * gpu.flops, c.eta_b * gpu.hbm_bw
        head = 0 if bench else s.head_params  # (the bench runs the layers' GEMMs only)
        self.f_tok = 2.0 * s.active_params_layer * L / tp / flops
        self.f_row = 2.0 * head / tp / flops
        self.w_dense = (L * s.dense_params_layer + head) * b / tp / bw
        self.w_expert = L * s.expert_params * b / tp / (c.eta_moe * gpu.hbm_bw)
        self.experts = float(s.experts)
        self.keep = 1.0 - s.experts_per_tok / s.experts if s.experts else 1.0
        self.kv = s.kv_bytes_per_gpu_token(tp) / bw
        self.f_pair = 4.0 * s.head_dim * s.heads * L / tp / flops  # QK and PV per (query, key) pair
        dattn = 0.0 if bench else 4.0 * s.head_dim * s.heads * L / tp / (c.eta_dattn * gpu.flops)
        self.ctx_cost = self.kv + dattn  # (the bench's decode reads its KV as one GEMV: no attention FLOPs)
        self.kv_new = 0.0 if bench else self.kv  # (the bench writes no KV)
        self.fix = L * c.t_layer + (0.0 if bench else c.t_step)
        n_ar, hops = 2 * L + 2, 2 * (tp - 1)
        self.ar_hop = n_ar * hops * c.t_ar if tp > 1 else 0.0
        self.ar_tok = n_ar * hops * s.hidden * b / tp / (gpu.link_bw / 2) if tp > 1 else 0.0
        self.p = c.p

    def args(self) -> tuple:
        return self.shape, self.gpu, self.tp, self.c, self.bench

    def __reduce__(self):  # (sweep workers and caches pickle a run's spec)
        return PhysicsLaw, self.args()

    def dense(self, tokens: float, rows: float) -> float:
        """The GEMMs' time: their FLOPs and the weights they read, combined by the p-norm."""
        tc = self.f_tok * tokens + self.f_row * rows
        tw = self.w_dense
        if self.experts > 0 and tokens > 0:
            tw += self.w_expert * self.experts * (1.0 - self.keep**tokens)
        hi, lo = (tc, tw) if tc > tw else (tw, tc)
        if lo <= 0:
            return hi
        return hi * (1.0 + (lo / hi) ** self.p) ** (1.0 / self.p)

    def time(self, pf: float, m: float, pairs: float, past: float, n_dec: float, sum_ctx: float) -> float:
        """step_time in floats (a mean composition: `saturated`)."""
        tokens = pf + n_dec
        t = self.fix + self.dense(tokens, m + n_dec) + self.attention(tokens, pairs, past, sum_ctx)
        return t + self.ar_hop + self.ar_tok * tokens if self.ar_hop > 0 else t

    def attention(self, tokens: float, pairs: float, past: float, sum_ctx: float) -> float:
        """Decodes' KV read and QK/PV, the chunks' past read and causal pairs, the new tokens' KV written."""
        return self.ctx_cost * sum_ctx + self.kv * past + self.kv_new * tokens + self.f_pair * pairs

    def step_time(self, pf: int, m: int, pairs: int, past: int, n_dec: int, sum_ctx: int) -> float:
        return self.time(pf, m, pairs, past, n_dec, sum_ctx)

    def decode_line(self, n_dec: int, sum_ctx: int) -> tuple[float, float]:
        """Every decode's context grows by one token a step: only the context term moves."""
        return self.time(0.0, 0.0, 0.0, 0.0, n_dec, sum_ctx), n_dec * self.ctx_cost

    def saturated(self, batch: float, prompt: float, output: float, prefill: float) -> float:
        """A saturated engine's mean step: `batch` decoders at mean context prompt + output/2, `prefill`
        tokens in batch/output chunks (prompts start at that rate), a whole prompt's causal pairs each."""
        starts = batch / output
        pairs = starts * prompt * (prompt + 1) / 2
        return self.time(prefill, starts, pairs, 0.0, batch, batch * (prompt + output / 2))

    def breakdown(self, pf: int, m: int, pairs: int, past: int, n_dec: int, sum_ctx: int) -> dict[str, float]:
        """The step's time by term (s): fixed, dense, attention, all-reduce (they add to step_time)."""
        tokens = pf + n_dec
        comm = self.ar_hop + self.ar_tok * tokens if self.ar_hop > 0 else 0.0
        return {
            "fixed": self.fix,
            "dense": self.dense(tokens, m + n_dec),
            "attention": self.attention(tokens, pairs, past, sum_ctx),
            "allreduce": comm,
        }
