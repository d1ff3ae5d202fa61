"""KV-cache blocks (PagedAttention, as vLLM pages them), SimPy-free: the pool's size and its accounting.

A request's KV cache lives in fixed blocks of `block_size` tokens. Admission allocates the blocks
of the whole prompt (vLLM V0's rule: `can_allocate`, keeping a watermark of free blocks); a
decoder whose context crosses a block boundary needs one more block at the iteration that writes
that token. Which decoders cross at an iteration depends only on the iteration's number modulo
the block size (each decoder's context grows by one token per iteration): a decoder with context
`ctx` at iteration t crosses whenever (ctx - 1) is a multiple of the block size, so its *phase*
(t - ctx + 1) mod block_size is fixed for its life. `cnt[p]` counts decoders by phase, and the
blocks a run of m pure-decode iterations from iteration t0 needs is a closed form in `cnt`
(`need`): ⌊m/bs⌋·B for whole cycles plus the partial cycle's sum. Fast-forward asks `safe_iters`
how many iterations fit in the free blocks (models/engine/serving.py), so runs stay exact and whole.

Blocks in use + free = pool at every instant (INV-23, models.results.invariants.check_kv): `used` is
kept incrementally here and recounted from the engine's requests by the check.
"""

from __future__ import annotations

import math
from array import array

import numpy as np


def bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """K and V of one token over every layer (vLLM's `get_kv_cache_spec`: 2 x layers x heads x dim x dtype)."""
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def pool_blocks(
    gpu_bytes: float, utilization: float, weights_bytes: float, activation_bytes: float, block_bytes: int
) -> int:
    """Blocks vLLM's memory profiler leaves for the KV cache: gpu x utilisation - weights - activations."""
    free = gpu_bytes * utilization - weights_bytes - activation_bytes
    if free < block_bytes:
        raise ValueError(
            f"no room for a KV block: {gpu_bytes:.4g} B x {utilization} - weights {weights_bytes:.4g} B "
            f"- activations {activation_bytes:.4g} B leaves {free:.4g} B (a block is {block_bytes} B)"
        )
    return int(free // block_bytes)


def blocks(tokens: int, bs: int) -> int:
    return -(-tokens // bs)


def never_rejects(kv, prompt, output) -> bool:
    """Whether pool `kv` can admit every request of these lengths (`KVPool.too_long` is never true),
    even one recomputed after a preemption, whose prompt is then its context so far (at most
    prompt + output - 1 tokens)."""
    if not len(prompt):
        return True
    last = np.asarray(prompt, dtype=np.int64) + np.asarray(output, dtype=np.int64) - 1
    return int(-(-last.max() // kv.bs)) + kv.wm <= kv.pool - kv.reserved - kv.hold


def grown(a, more: int) -> array:
    """A copy of array `a` with `more` zero slots after it: a new array (the compiled pool holds a
    typed view of the old one, whose buffer cannot be resized)."""
    out = array("q", [a[j] for j in range(len(a))])
    out.frombytes(bytes(8 * more))
    return out


class KVPool:
    """One engine's block pool. `cap` = pool - reserved (merge buffers and a prefix cache holding GPU
    memory); `used` counts the blocks held by running requests (less those a prefix cache holds for
    them: `shared`); the rest is free. Statistics: `preemptions`,
    `rejected` (too long ever to fit), `peak` (largest used/cap after an iteration's allocations)
    and the iteration-weighted sums `sum_used`, `sum_cap` (their ratio is the mean usage), `copied`
    (blocks swapped out and in, with a mode that copies). `mode`: what preemption does with a decoder
    (models.engine.preemption, engine.preemption)."""

    __slots__ = ("bs", "pool", "reserved", "cap", "wm", "_cnt", "used", "orig") + (
        "_run_nxt",
        "_run_prv",
        "n_running",
        "_share",
        "mode",
        "hold",
        "holding",
        "held",
        "copy",
        "copied",
        "preemptions",
        "rejected",
        "peak",
        "sum_used",
        "sum_cap",
        "need_now",
    )

    def __init__(
        self, pool: int, block_size: int, watermark: float = 0.0, reserved: int = 0, preemption: str = "recompute"
    ):
        if pool < 1 or block_size < 1:
            raise ValueError(f"a KV pool needs at least one block of at least one token (got {pool}, {block_size})")
        self.bs, self.pool, self.reserved = block_size, pool, reserved
        self.cap = pool - reserved
        if self.cap < 1:
            raise ValueError(f"merge buffers ({reserved} blocks) leave no KV block of the pool's {pool}")
        self.wm = math.floor(watermark * pool)  # vLLM V0: watermark_blocks = watermark x num_gpu_blocks
        self._cnt = array("q", bytes(8 * block_size))  # decoders by phase (`cnt`)
        self.used = 0
        # the running requests in (re)admission order (preemption picks the last): a list linked through
        # request r's node r + 1 (`run_nxt`, `run_prv`; node 0 is its head and tail), and per request the
        # blocks a prefix cache holds for it (`_share`: held once, for all; 0 when it is not running).
        # Arrays over request ids, not dicts: every admission and finish updates them, and a typed
        # array does it without boxing the id. The engine sizes them (`room`) as its requests grow.
        self._run_nxt, self._run_prv, self._share = array("q", [0]), array("q", [0]), array("q")
        self.n_running = 0
        self.orig: dict[int, tuple[int, int]] = {}  # preempted request -> its own (prompt, output) lengths
        self.preemptions = self.rejected = 0
        self.peak = 0.0
        self.sum_used = self.sum_cap = 0
        self.need_now = 0  # blocks the decoders take at the iteration about to start
        from .preemption import MODES  # (here: the compiled modes' module imports this one's types)

        if preemption not in MODES:
            raise ValueError(f"unknown preemption mode {preemption!r} ({', '.join(MODES)})")
        self.mode = MODES[preemption]()
        # blocks merge buffers take while a merge runs (engine.merge_memory: merge; 0: none), whether they
        # are asked for (`holding`, set when a merge starts or ends) and whether `cap` counts them (`held`)
        self.hold = 0
        self.holding = self.held = False
        self.copy = self.copied = 0  # blocks to copy over PCIe before the next iteration; blocks copied so far

    # -- the running requests (by request id) --------------------------------------------------
    def room(self, n: int) -> None:
        """Room for requests 0 .. n-1 (the engine calls it as its request arrays grow)."""
        more = n - len(self._share)
        if more > 0:
            self._run_nxt, self._run_prv = grown(self._run_nxt, more), grown(self._run_prv, more)
            self._share = grown(self._share, more)

    def run_add(self, rid: int) -> None:
        """Request rid runs (admitted, re-admitted or swapped in): it becomes the last."""
        s = rid + 1  # (the arrays are read through self: see models.engine.prefix PrefixCache._find)
        last = self._run_prv[0]
        self._run_prv[s], self._run_nxt[s] = last, 0
        self._run_nxt[last] = self._run_prv[0] = s
        self.n_running += 1

    def run_del(self, rid: int) -> None:
        """Request rid stops running (finished or preempted)."""
        s = rid + 1
        p, q = self._run_prv[s], self._run_nxt[s]
        self._run_nxt[p], self._run_prv[q] = q, p
        self.n_running -= 1

    def last_running(self) -> int:
        """The most recently (re)admitted running request (-1: none)."""
        return self._run_prv[0] - 1

    @property
    def running(self) -> dict[int, None]:
        """The running requests in (re)admission order (a copy: for checks and tests)."""
        out, nxt = {}, self._run_nxt
        s = nxt[0]
        while s:
            out[s - 1] = None
            s = nxt[s]
        return out

    @property
    def swap(self) -> bool:
        """Whether preemption copies blocks to host memory (its copies need the host's PCIe link)."""
        return self.mode.copies

    @property
    def shared(self) -> dict[int, int]:
        """Request -> its blocks the prefix cache holds, for requests that have some (a copy)."""
        return {rid: self._share[rid] for rid in range(len(self._share)) if self._share[rid]}

    @property
    def cnt(self) -> list[int]:
        """The decoders by block phase (a copy: for checks and tests)."""
        return [self._cnt[p] for p in range(self.bs)]

    # -- the engine's bookkeeping (models.engine.serving, models.engine.preemption) ------------------------
    def blocks(self, tokens: int) -> int:
        """The blocks that hold `tokens` tokens."""
        return -(-tokens // self.bs)

    def enter(self, x: int) -> None:
        """A decoder of phase x (mod block_size) starts decoding."""
        self._cnt[x % self.bs] += 1

    def leave(self, x: int) -> int:
        """A decoder of phase x (mod block_size) stops decoding; returns its phase."""
        p = x % self.bs
        self._cnt[p] -= 1
        return p

    def crossing(self, t: int) -> int:
        """The decoders that cross a block boundary at iteration t (each takes a block)."""
        return self._cnt[t % self.bs]

    def set_share(self, rid: int, k: int) -> None:
        """A prefix cache holds k of request rid's blocks (counted once, by the cache)."""
        self._share[rid] = k

    def free(self, rid: int, nb: int) -> None:
        """Request rid, which held nb blocks, stops running: its own blocks go back (not the cache's)."""
        self.used -= nb - self._share[rid]
        self._share[rid] = 0

    def apply_hold(self) -> None:
        """The engine, before an iteration (models.engine.serving make_room): merge buffers take their blocks
        or give them back, as asked since the last one (`holding`); make_room then preempts until
        the running requests fit, so blocks in use never exceed `cap` (INV-23)."""
        self.held = self.holding
        base = self.pool - self.reserved
        self.cap = base - self.hold if self.held else base

    def too_long(self, total: int, prompt: int) -> bool:
        """A request that could never run: its last iteration's context, or its prompt and the
        watermark, exceeds the smallest the pool gets."""
        bs, cap = self.bs, self.pool - self.reserved - self.hold
        return blocks(total - 1, bs) > cap or blocks(prompt, bs) + self.wm > cap

    def _partial(self, p0: int, j: int) -> int:
        bs, s = self.bs, 0
        for x in range(j):
            s += self._cnt[(p0 + x) % bs]
        return s

    def need(self, m: int, t0: int, n_dec: int) -> int:
        """Blocks the decoders take over the m iterations from iteration t0 (membership fixed)."""
        q, r = m // self.bs, m % self.bs
        return q * n_dec + (self._partial(t0 % self.bs, r) if r else 0)

    def safe_iters(self, t0: int, n_dec: int) -> int:
        """The most iterations from t0 whose blocks fit in the free ones (the first always does:
        the engine made room for it)."""
        free, bs = self.cap - self.used, self.bs  # (self._cnt read through self: a local view costs two atomics a call)
        q, r = free // n_dec, free % n_dec  # (not divmod: the compiled pool computes these in C)
        p, j, s = t0 % bs, 0, 0  # p: the phase of iteration t0 + j (a wrapping index: no division per step)
        while j < bs:
            s += self._cnt[p]
            if s > r:
                break
            j += 1
            p = p + 1 if p + 1 < bs else 0
        return q * bs + j

    def grow(self, k: int, t0: int, n_dec: int) -> None:
        """Book the blocks of k iterations from t0 (they fit: `safe_iters`) and their usage: the
        iteration-weighted sum of used blocks, each iteration counting its own allocations."""
        used = self.used
        if n_dec and k == 1:  # (the loop below for one iteration: its blocks, then its usage)
            self.used = used = used + self._cnt[t0 % self.bs]
            self.sum_used += used
        elif n_dec:
            # After iteration m = c*bs + x of the k (1 <= m <= k, 0 <= x < bs) the decoders took
            # c*n_dec + pref(x) blocks, pref(x) being what the first x iterations of a cycle take. With
            # k = q*bs + r, residue x occurs q times (q + 1 for 1 <= x <= r), so the sum over m is
            # n_dec * sum(m // bs) + q * sum(pref(x), x < bs) + sum(pref(x), x <= r): one pass over the
            # phases, adding only (no division per phase).
            bs = self.bs
            q, r = k // bs, k % bs
            p = t0 % bs  # the phase of the cycle's x-th iteration (a wrapping index)
            s = acc = pr = accr = 0  # s: pref(x); acc: pref(0) + ... + pref(x)
            for x in range(bs if q else r + 1):
                acc += s
                if x == r:
                    pr, accr = s, acc
                s += self._cnt[p]
                p = p + 1 if p + 1 < bs else 0
            total = n_dec * (bs * (q * (q - 1) // 2) + q * (r + 1)) + q * acc + accr
            self.sum_used += k * used + total
            self.used = used = used + q * n_dec + pr
        else:
            self.sum_used += k * used
        self.sum_cap += k * self.cap
        u = used / self.cap
        if u > self.peak:
            self.peak = u
