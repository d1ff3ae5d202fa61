"""A prefix cache of KV blocks keyed by block hashes (vLLM's automatic prefix caching), SimPy-free.

A request carries the hashes of its prompt's blocks (Mooncake traces: `hash_ids`, one per 512-token
block, models.workload.traces); two requests whose first k hashes agree share the KV of those k blocks. At
admission the engine asks for the request's hit (`lookup`: the longest run of its leading hashes
in the cache, as vLLM matches a prefix block by block) and, if it admits the request, takes it
(`acquire`): those entries become the most recently used and are pinned (ref-counted) while the
request runs, because its KV for those blocks is the cache's copy. When its prefill completes the
request's blocks are inserted (`insert`); a full cache evicts its least recently used unpinned
entry, and when every entry is pinned the new block is not cached. `release` unpins a request's
entries when it finishes or is preempted (the engine keeps how many it pins: a pinned entry keeps
its slot, so its hashes find them again). docs/engine.md.

Capacity is counted in hash blocks (`capacity` blocks of `block_tokens` tokens). Statistics:
`hit_tokens` and `prompt_tokens` over first admissions (their ratio is the run's prefix_hit_rate).
"""

from __future__ import annotations

from array import array

from .kv import grown

MOONCAKE_BLOCK_TOKENS = 512  # Mooncake FAST'25 trace README: hash_ids are 512-token prefix blocks


M64 = (1 << 64) - 1  # (prefix.pxd: C unsigned 64-bit, where these wrap as Python's masks do)
GOLDEN = 0x9E3779B97F4A7C15  # Fibonacci hashing: 2^64 / the golden ratio, odd


class PrefixCache:
    """An LRU of block hashes with ref-counted pins, in slots 1, 2, ...: the slots form a doubly
    linked list from least to most recently used (`prv`, `nxt`; slot 0 is the list's head and
    tail), with each slot's hash (`key`) and pins (`pin`); `tab` maps a hash to its slot (open
    addressing, linear probing, at most half full; 0: empty). A pinned entry is never evicted and
    keeps its slot. Hashes are 64-bit (models.workload.traces checks a trace's).
    The arrays grow with the entries, up to `capacity`; they are typed in C when setup.py compiles
    this module (prefix.pxd): every admission, prefill and finish asks it."""

    __slots__ = ("capacity", "block_tokens", "size", "bits")
    __slots__ += ("hit_tokens", "prompt_tokens", "epoch", "_key", "_prv", "_nxt", "_pin", "_tab")

    def __init__(self, capacity: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS):
        if capacity < 1 or block_tokens < 1:
            raise ValueError(f"a prefix cache needs a block of a token or more (got {capacity}, {block_tokens})")
        self.capacity, self.block_tokens = capacity, block_tokens
        self.size = 0  # slots in use (1 .. size); when all `capacity` are, a new entry takes its victim's
        n = min(capacity, 63) + 1  # (slots 0 .. n-1; `_room` grows them)
        self._key, self._pin, self._prv, self._nxt = (array("q", bytes(8 * n)) for _ in range(4))
        self._table(7)
        self.hit_tokens = self.prompt_tokens = 0
        self.epoch = 0  # moves whenever the set of cached hashes changes: `lookup`'s answers hold until then

    # -- storage ---------------------------------------------------------------------------------
    def _slots(self, n: int) -> None:
        """Room for slots 0 .. n-1 (new arrays: the compiled cache holds typed views of the old ones)."""
        more = n - len(self._key)
        self._key, self._pin = grown(self._key, more), grown(self._pin, more)
        self._prv, self._nxt = grown(self._prv, more), grown(self._nxt, more)

    def _table(self, bits: int) -> None:
        """A table of 2**bits cells holding every entry again."""
        self.bits, self._tab = bits, array("q", bytes(8 << bits))
        nxt, s = self._nxt, self._nxt[0]
        while s:
            self._put(self._key[s], s)
            s = nxt[s]

    def _room(self, m: int) -> None:
        """Before up to m new entries: slots and a table at most half full for them."""
        want = min(self.size + m, self.capacity) + 1
        if want > len(self._key):
            self._slots(min(max(want, 2 * len(self._key)), self.capacity + 1))
        bits = self.bits
        while 2 * want > (1 << bits):
            bits += 1
        if bits != self.bits:
            self._table(bits)

    def _home(self, h: int) -> int:
        return ((h & M64) * GOLDEN & M64) >> (64 - self.bits)

    def _find(self, h: int) -> int:
        """Hash h's slot (0: not cached). (The arrays are read through self: compiled, a typed view
        taken into a local costs a reference count each call, more than the probe.)"""
        mask = (1 << self.bits) - 1
        j = self._home(h)
        s = self._tab[j]
        while s:
            if self._key[s] == h:
                return s
            j = (j + 1) & mask
            s = self._tab[j]
        return 0

    def _put(self, h: int, s: int) -> None:
        mask = (1 << self.bits) - 1
        j = self._home(h)
        while self._tab[j]:
            j = (j + 1) & mask
        self._tab[j] = s

    def _drop(self, h: int) -> None:
        """Hash h (cached) leaves the table; the cells after it move back (linear probing's deletion)."""
        mask = (1 << self.bits) - 1
        i = self._home(h)
        while self._key[self._tab[i]] != h:
            i = (i + 1) & mask
        j = i
        while True:
            j = (j + 1) & mask
            s = self._tab[j]
            if not s:
                break
            home = self._home(self._key[s])
            if not (i < home <= j if i <= j else home > i or home <= j):  # its home is not in (i, j]
                self._tab[i] = s
                i = j
        self._tab[i] = 0

    # -- views -----------------------------------------------------------------------------------
    @property
    def entries(self) -> list[int]:
        """The cached hashes from least to most recently used."""
        out, s = [], self._nxt[0]
        while s:
            out.append(self._key[s])
            s = self._nxt[s]
        return out

    @property
    def pins(self) -> dict[int, int]:
        """Pinned hash -> its pins."""
        out, s = {}, self._nxt[0]
        while s:
            if self._pin[s]:
                out[self._key[s]] = self._pin[s]
            s = self._nxt[s]
        return out

    # -- the engine's calls ----------------------------------------------------------------------
    def lookup(self, hashes) -> int:
        """How many of `hashes`' leading blocks are cached (no side effect)."""
        k = 0
        for h in hashes:
            if not self._find(h):
                break
            k += 1
        return k

    def _to_end(self, s: int) -> None:
        """Slot s (linked) becomes the most recently used."""
        last = self._prv[0]
        if last == s:
            return
        p, q = self._prv[s], self._nxt[s]
        self._nxt[p], self._prv[q] = q, p
        self._prv[s], self._nxt[s] = last, 0
        self._nxt[last] = self._prv[0] = s

    def acquire(self, hashes, k: int) -> None:
        """A request uses the cached first k blocks of `hashes`: they become the most recently used,
        and stay pinned until `release(hashes, k)`."""
        for j in range(k):
            s = self._find(hashes[j])
            self._to_end(s)
            self._pin[s] += 1

    def release(self, hashes, k: int) -> None:
        """The request that acquired these k blocks finished or was preempted: they are unpinned (and
        stay cached)."""
        for j in range(k):
            self._pin[self._find(hashes[j])] -= 1

    def insert(self, hashes) -> None:
        """A prompt with these block hashes has been computed: each block becomes the most recently
        used, evicting the least recently used unpinned entry when the cache is full; a block that
        finds every entry pinned is not cached (nor are the blocks after it)."""
        self._room(len(hashes))
        # (the arrays are read through self, as in `_find`: compiled, four typed views taken into
        # locals cost more reference counting than this loop does for a short prompt)
        for h in hashes:
            s = self._find(h)
            if s:
                self._to_end(s)
                continue
            if self.size < self.capacity:
                s = self.size = self.size + 1
            else:
                s = self._nxt[0]  # the least recently used unpinned entry
                while s and self._pin[s]:
                    s = self._nxt[s]
                if not s:
                    return
                self._drop(self._key[s])
                p, q = self._prv[s], self._nxt[s]
                self._nxt[p], self._prv[q] = q, p
            self._key[s] = h
            self._put(h, s)
            self.epoch += 1
            last = self._prv[0]  # linked in as the most recently used
            self._prv[s], self._nxt[s] = last, 0
            self._nxt[last] = self._prv[0] = s

    def hit_rate(self) -> float:
        """Prompt tokens served from the cache over prompt tokens, at first admissions."""
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def shared_prefix_hashes(
    prompt, sidecar: int, rng, fraction: float, prompts: int, tokens: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> tuple[tuple[int, ...], ...]:
    """Block hashes for synthetic requests (engine.shared_prefix): with probability `fraction` a
    request's first min(tokens, prompt) tokens are one of `prompts` system prompts (uniformly), so
    their whole blocks hash alike across requests and sidecars; every other block is the request's
    own. Ids: (prompt j, block b) -> j << 16 | b; a request's own -> (sidecar + 1) << 48 | i << 16 | b
    (b < 2^15: MAX_TOKENS / 512 blocks)."""
    n = len(prompt)
    share = rng.random(n) < fraction
    which = rng.integers(0, prompts, size=n)
    out = []
    for i in range(n):
        p = int(prompt[i])
        total = -(-p // block_tokens)
        k = min(tokens, p) // block_tokens if share[i] else 0
        j = int(which[i]) << 16
        own = (sidecar + 1) << 48 | i << 16
        out.append(tuple(j | b for b in range(k)) + tuple(own | b for b in range(k, total)))
    return tuple(out)
