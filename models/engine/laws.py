"""Latency laws: the GPU time of one engine iteration from its composition.

An iteration's composition: `pf` prefill tokens in `m` chunks, the chunks' causal attention pairs
(`pairs`: a chunk of `take` tokens after `past` computed ones adds take*past + take*(take+1)/2,
models.engine.latency.attention_pairs) and their `past` tokens summed, and `n_dec` decoding requests
whose contexts add up to `sum_ctx`. A law gives its GPU time (`step_time`) and, when it has one, an
exact line for runs of pure-decode iterations (`line`): with the batch fixed every decoder's context
grows by one token an iteration, and iteration i of a run that starts at summed context S takes
g0 + i*dg, `decode_line(n_dec, S) -> (g0, dg)`, g0 bit for bit the law's `step_time` of that first
iteration. The engine then times a whole run in closed form (models.engine.batching); without a line it
steps one iteration at a time. `detail`: the law reads `pairs` and `past` (the engine counts them only then).
`saturated` is the mean iteration of a saturated engine, which models.engine.capacity turns into a rate.

The laws: linear and attention (models.engine.latency fits both to the H200 rows) and table (measured
step times, interpolated). docs/engine.md; docs/extending.md adds one.
"""

from __future__ import annotations

from array import array


class LatencyLaw:
    """A latency law (module docstring). Subclasses set `line` and `detail` and implement `step_time`,
    `saturated` and `args` (the constructor's arguments: laws with equal ones are equal), and
    `decode_line` when `line` is set."""

    __slots__ = ("line", "detail")

    def __init__(self) -> None:
        self.line = False
        self.detail = False

    def step_time(self, pf: int, m: int, pairs: int, past: int, n_dec: int, sum_ctx: int) -> float:
        raise NotImplementedError

    def decode_line(self, n_dec: int, sum_ctx: int) -> tuple[float, float]:
        """(g0, dg) of a run of pure-decode iterations from summed context sum_ctx (only with `line`)."""
        return self.step_time(0, 0, 0, 0, n_dec, sum_ctx), 0.0

    def saturated(self, batch: float, prompt: float, output: float, prefill: float) -> float:
        """The GPU time of a saturated engine's mean iteration: `batch` running requests of mean prompt
        and output lengths, `prefill` prefill tokens (models.engine.capacity)."""
        raise NotImplementedError

    def args(self) -> tuple:
        raise NotImplementedError

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.args() == self.args()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.args()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self.args()!r}"


class LinearLaw(LatencyLaw):
    """t = a + b*prefill_tokens + c*sum_ctx + d*batch, batch = decoders + chunks (SPEC.md's law)."""

    __slots__ = ("a", "b", "c", "d")

    def __init__(self, a: float, b: float, c: float, d: float) -> None:
        self.a, self.b, self.c, self.d = a, b, c, d
        self.line = True
        self.detail = False

    def step_time(self, pf: int, m: int, pairs: int, past: int, n_dec: int, sum_ctx: int) -> float:
        return self.a + self.b * pf + self.c * sum_ctx + self.d * (n_dec + m)

    def decode_line(self, n_dec: int, sum_ctx: int) -> tuple[float, float]:
        return self.a + self.c * sum_ctx + self.d * n_dec, self.c * n_dec  # (step_time's value: a + b*0 is a)

    def saturated(self, batch: float, prompt: float, output: float, prefill: float) -> float:
        return self.a + self.b * prefill + self.c * batch * (prompt + output / 2) + self.d * batch

    def args(self) -> tuple:
        return self.a, self.b, self.c, self.d


class AttentionLaw(LinearLaw):
    """The linear law plus e per causal attention pair of the prefill chunks (form `attention`)."""

    __slots__ = ("e",)

    def __init__(self, a: float, b: float, c: float, d: float, e: float) -> None:
        LinearLaw.__init__(self, a, b, c, d)
        self.e = e
        self.detail = True

    def step_time(self, pf: int, m: int, pairs: int, past: int, n_dec: int, sum_ctx: int) -> float:
        g = self.a + self.b * pf + self.c * sum_ctx + self.d * (n_dec + m)
        return g + self.e * pairs if self.e else g

    def saturated(self, batch: float, prompt: float, output: float, prefill: float) -> float:
        g = LinearLaw.saturated(self, batch, prompt, output, prefill)
        # a prompt of P tokens makes P(P+1)/2 causal pairs however it is chunked; batch/output prompts
        # start per iteration
        return g + self.e * (batch / output) * (prompt * (prompt + 1) / 2)

    def args(self) -> tuple:
        return self.a, self.b, self.c, self.d, self.e


def lerp(y0: float, y1: float, t: float) -> float:
    """y0 at t = 0 and y1 at t = 1 exactly; straight beyond them."""
    return y0 * (1.0 - t) + y1 * t


def _cell(xs, x: float) -> int:
    """The segment [xs[k], xs[k + 1]] that interpolates at x (the first or last one beyond the ends):
    k = bisect_right(xs, x) - 1, clamped."""
    lo, hi = 0, len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
        if x < xs[mid]:
            hi = mid
        else:
            lo = mid + 1
    k = lo - 1
    last = len(xs) - 2
    return 0 if k < 0 else (last if k > last else k)


class TableLaw(LatencyLaw):
    """Measured step times, interpolated: D(batch, context) of pure-decode iterations on a grid (each
    batch with each context per sequence), bilinear between the grid's points, and P(tokens) of one
    prompt's chunk alone, piecewise linear; both straight beyond the measured range (a line through
    the nearest two points; one point: constant). An iteration of n_dec decoders and m chunks of pf
    tokens takes D(n_dec + m, sum_ctx / (n_dec + m)) + P(pf) - P(0) (every sequence of the batch is a
    row of D, a chunk's tokens cost what they add to a prefill): a linear law's own points give the
    linear law back. Chunked prefill's attention over the cached context is not in P (`detail` off).
    No line: a decode run's context moves across the grid's cells, where the slope changes."""

    __slots__ = ("batches", "contexts", "decode", "tokens", "prefill", "p0", "_b", "_x", "_d", "_t", "_p")

    def __init__(self, batches, contexts, decode, tokens, prefill) -> None:
        """decode[i * len(contexts) + j]: seconds at batches[i] and contexts[j]; prefill[k] at tokens[k]."""
        self.batches, self.contexts, self.decode = array("d", batches), array("d", contexts), array("d", decode)
        self.tokens, self.prefill = array("d", tokens), array("d", prefill)
        if len(self.decode) != len(self.batches) * len(self.contexts) or len(self.prefill) != len(self.tokens):
            raise ValueError("a table law needs one decode time per (batch, context) and one per prefill size")
        for xs in (self.batches, self.contexts, self.tokens):
            if not len(xs) or any(xs[k] >= xs[k + 1] for k in range(len(xs) - 1)):
                raise ValueError("a table law's batches, contexts and prefill sizes ascend, at least one each")
        self._b, self._x, self._d, self._t, self._p = (
            self.batches,
            self.contexts,
            self.decode,
            self.tokens,
            self.prefill,
        )
        self.line = False
        self.detail = False
        self.p0 = self.prefill_time(0.0)

    def prefill_time(self, pf: float) -> float:
        """P(pf): one chunk of pf tokens alone."""
        if len(self._t) == 1:
            return self._p[0]
        k = _cell(self._t, pf)
        return lerp(self._p[k], self._p[k + 1], (pf - self._t[k]) / (self._t[k + 1] - self._t[k]))

    def _row(self, i: int, x: float) -> float:
        """D(batches[i], x)."""
        nx = len(self._x)
        if nx == 1:
            return self._d[i]
        j = _cell(self._x, x)
        t = (x - self._x[j]) / (self._x[j + 1] - self._x[j])
        return lerp(self._d[i * nx + j], self._d[i * nx + j + 1], t)

    def decode_time(self, batch: float, context: float) -> float:
        """D(batch, context): a pure-decode iteration of `batch` sequences of `context` tokens each."""
        if len(self._b) == 1:
            return self._row(0, context)
        i = _cell(self._b, batch)
        t = (batch - self._b[i]) / (self._b[i + 1] - self._b[i])
        return lerp(self._row(i, context), self._row(i + 1, context), t)

    def step_time(self, pf: int, m: int, pairs: int, past: int, n_dec: int, sum_ctx: int) -> float:
        rows = n_dec + m
        g = self.decode_time(rows, sum_ctx / rows if rows else 0.0)
        return g + (self.prefill_time(pf) - self.p0) if m else g

    def saturated(self, batch: float, prompt: float, output: float, prefill: float) -> float:
        return self.decode_time(batch, prompt + output / 2) + (self.prefill_time(prefill) - self.p0)

    def args(self) -> tuple:
        return tuple(self.batches), tuple(self.contexts), tuple(self.decode), tuple(self.tokens), tuple(self.prefill)


CLASSES = {cls.__name__: cls for cls in (LinearLaw, AttentionLaw, TableLaw)}


def law_of(lat) -> LatencyLaw:
    """`lat` as a law of this core: one of its own laws as it is; the other core's twin of one (the pure
    and compiled cores each have their classes) rebuilt from its arguments; a fitted model
    (models.engine.latency.LatencyModel) as the linear law of its coefficients, or the attention law
    when it has an attention term."""
    if isinstance(lat, LatencyLaw):
        return lat
    name = type(lat).__name__
    if name in CLASSES and hasattr(lat, "args"):
        return CLASSES[name](*lat.args())
    if lat.e:
        return AttentionLaw(lat.a, lat.b, lat.c, lat.d, lat.e)
    return LinearLaw(lat.a, lat.b, lat.c, lat.d)
