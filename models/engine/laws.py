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
step times, interpolated). A law written elsewhere (a subclass of `LatencyLaw` in a module of its own)
runs as it is in the pure core and through `Delegate` in the compiled one (`law_of`). docs/engine.md;
docs/extending.md adds one.
"""

from __future__ import annotations

from array import array


class LatencyLaw:
    """A latency law (module docstring). Subclasses set `line` and `detail` and implement `step_time`,
    `saturated` and `args` (the constructor's arguments: laws with equal ones are equal, and a law is
    pickled as them), and `decode_line` when `line` is set."""

    __slots__ = ("line", "detail")

    def __init__(self) -> None:
        self.line = False
        self.detail = False

    def step_time(self, pf: int, m: int, pairs: int, past: int, n_dec: int, sum_ctx: int) -> float:
        raise NotImplementedError

    def decode_line(self, n_dec: int, sum_ctx: int) -> tuple[float, float]:
        """(g0, dg) of a run of pure-decode iterations from summed context sum_ctx (asked only with `line`)."""
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

    def __reduce__(self):
        return type(self), self.args()

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self.args()!r}"


class LinearLaw(LatencyLaw):
    """t = a + b*prefill_tokens + c*sum_ctx + d*batch, batch = decoders + chunks (the design card's law)."""

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


def _cell(xs, lo: int, hi: int, x: float) -> int:
    """The segment [xs[k], xs[k + 1]] of the ascending points xs[lo:hi] (at least two) that interpolates
    at x: k = bisect_right(xs, x, lo, hi) - 1, clamped to [lo, hi - 2] (the first or last beyond the ends)."""
    a, b = lo, hi
    while a < b:
        mid = (a + b) // 2
        if x < xs[mid]:
            b = mid
        else:
            a = mid + 1
    k = a - 1
    return lo if k < lo else (hi - 2 if k > hi - 2 else k)


def _polyline(xs, ys, lo: int, hi: int, x: float) -> float:
    """The piecewise-linear function through the points (xs[k], ys[k]), lo <= k < hi, at x: straight on
    beyond the ends (the line through the nearest two points); one point: constant."""
    if hi - lo == 1:
        return ys[lo]
    k = _cell(xs, lo, hi, x)
    return lerp(ys[k], ys[k + 1], (x - xs[k]) / (xs[k + 1] - xs[k]))


class TableLaw(LatencyLaw):
    """Measured step times, interpolated: no fitted form, the natural law of an engine's measurements.

    `decode`: (batch, context per sequence, seconds) of pure-decode iterations, each context measured at
    batch sizes of its own; D(batch, ctx) is piecewise linear in the batch along each measured context
    and linear in the context between the two measured ones around it. `prefill`: (tokens, seconds) of
    one prompt's prefill alone, P(tokens), piecewise linear. Beyond the measured range both go straight
    on (the line through the nearest two points; one point: constant). An iteration of n_dec decoders
    (summed context sum_ctx) and m chunks of pf tokens takes

        D(n_dec + m, sum_ctx / (n_dec + m)) + (P(pf) - D(1, 0))     (the second term only with chunks)

    every sequence a row of D and the chunks adding what a lone prefill costs over a lone empty step: a
    lone prefill takes P, a pure-decode batch D, at their measured points exactly, and a linear law's
    own values give the linear law back (bilinear interpolation is exact for a + c*batch*ctx + d*batch).
    Prefill attention over the cached context is not in P (`detail` off). No line: a decode run's
    context crosses the table's cells, where the slope changes, so the engine steps it one iteration
    at a time."""

    __slots__ = ("decode", "prefill", "base", "_ctx", "_start", "_bat", "_dec", "_tok", "_pre")

    def __init__(self, decode, prefill) -> None:
        self.decode = tuple(sorted((float(b), float(x), float(s)) for b, x, s in decode))
        self.prefill = tuple(sorted((float(t), float(s)) for t, s in prefill))
        if not self.decode or not self.prefill:
            raise ValueError("a table law needs at least one decode and one prefill time")
        cells = [(b, x) for b, x, _ in self.decode]
        tokens = [t for t, _ in self.prefill]
        if len(set(cells)) < len(cells) or len(set(tokens)) < len(tokens):
            raise ValueError("a table law has one time per (batch, context) and one per prefill size")
        ctx = sorted({x for _, x, _ in self.decode})
        start, bat, dec = [0], [], []
        for c in ctx:  # each context's batches, ascending (the rows are sorted)
            bat += [b for b, x, _ in self.decode if x == c]
            dec += [s for _, x, s in self.decode if x == c]
            start.append(len(bat))
        self._ctx, self._start = array("d", ctx), array("q", start)
        self._bat, self._dec = array("d", bat), array("d", dec)
        self._tok, self._pre = array("d", tokens), array("d", [s for _, s in self.prefill])
        self.line = False
        self.detail = False
        self.base = self.decode_time(1.0, 0.0)

    def prefill_time(self, tokens: float) -> float:
        """P(tokens): one prompt's prefill alone."""
        return _polyline(self._tok, self._pre, 0, len(self._tok), tokens)

    def _column(self, j: int, batch: float) -> float:
        """D(batch, the j-th measured context)."""
        return _polyline(self._bat, self._dec, self._start[j], self._start[j + 1], batch)

    def decode_time(self, batch: float, ctx: float) -> float:
        """D(batch, ctx): a pure-decode iteration of `batch` sequences of `ctx` tokens of context each."""
        n = len(self._ctx)
        if n == 1:
            return self._column(0, batch)
        j = _cell(self._ctx, 0, n, ctx)
        t = (ctx - self._ctx[j]) / (self._ctx[j + 1] - self._ctx[j])
        return lerp(self._column(j, batch), self._column(j + 1, batch), t)

    def step_time(self, pf: int, m: int, pairs: int, past: int, n_dec: int, sum_ctx: int) -> float:
        rows = n_dec + m
        g = self.decode_time(float(rows), float(sum_ctx) / rows if rows else 0.0)
        return g + (self.prefill_time(float(pf)) - self.base) if m else g

    def saturated(self, batch: float, prompt: float, output: float, prefill: float) -> float:
        return self.decode_time(batch, prompt + output / 2) + (self.prefill_time(prefill) - self.base)

    def args(self) -> tuple:
        return self.decode, self.prefill


class Delegate(LatencyLaw):
    """A law of another class (written outside this module: a subclass of the pure core's LatencyLaw,
    which the compiled core's classes are not), run by calling it: Python calls, the same values."""

    __slots__ = ("law",)

    def __init__(self, law) -> None:
        self.law = law
        self.line = bool(law.line)
        self.detail = bool(law.detail)

    def step_time(self, pf: int, m: int, pairs: int, past: int, n_dec: int, sum_ctx: int) -> float:
        return self.law.step_time(pf, m, pairs, past, n_dec, sum_ctx)

    def decode_line(self, n_dec: int, sum_ctx: int) -> tuple[float, float]:
        g0, dg = self.law.decode_line(n_dec, sum_ctx)
        return g0, dg

    def saturated(self, batch: float, prompt: float, output: float, prefill: float) -> float:
        return self.law.saturated(batch, prompt, output, prefill)

    def args(self) -> tuple:
        return (self.law,)


CLASSES = {cls.__name__: cls for cls in (LinearLaw, AttentionLaw, TableLaw, Delegate)}


def law_of(lat) -> LatencyLaw:
    """`lat` as a law of this core: one of its laws as it is; the other core's twin of one of this
    module's laws rebuilt from its arguments (the pure and compiled cores each have their classes); a
    fitted model (models.engine.latency.LatencyModel) as its law; any other law through `Delegate`."""
    if isinstance(lat, LatencyLaw):
        return lat
    cls = CLASSES.get(type(lat).__name__)
    if cls is not None and hasattr(lat, "args"):
        return cls(*lat.args())
    if hasattr(lat, "law"):
        return law_of(lat.law())
    return Delegate(lat)
