"""A prefix cache of KV blocks keyed by block hashes (vLLM's automatic prefix caching), SimPy-free.

A request carries the hashes of its prompt's blocks (Mooncake traces: `hash_ids`, one per 512-token
block, models.traces); two requests whose first k hashes agree share the KV of those k blocks. At
admission the engine asks for the request's hit (`lookup`: the longest run of its leading hashes
in the cache, as vLLM matches a prefix block by block) and, if it admits the request, takes it
(`acquire`): those entries become the most recently used and are pinned (ref-counted) while the
request runs, because its KV for those blocks is the cache's copy. When its prefill completes the
request's blocks are inserted (`insert`); a full cache evicts its least recently used unpinned
entry, and when every entry is pinned the new block is not cached. `release` unpins a request's
entries when it finishes or is preempted. docs/engine.md.

Capacity is counted in hash blocks (`capacity` blocks of `block_tokens` tokens). Statistics:
`hit_tokens` and `prompt_tokens` over first admissions (their ratio is the run's prefix_hit_rate).
"""

from __future__ import annotations

from array import array

MOONCAKE_BLOCK_TOKENS = 512  # Mooncake FAST'25 trace README: hash_ids are 512-token prefix blocks


class PrefixCache:
    """An LRU of block hashes with ref-counted pins, in slots: `where` maps a cached hash to its slot,
    and the slots form a doubly linked list from least to most recently used (`prv`, `nxt`; slot
    `capacity` is the list's head and tail), with each slot's hash (`key`) and pins (`pin`). A pinned
    entry is never evicted, so a request holds its entries by slot (`mine`). The arrays are typed in
    C when setup.py compiles this module (prefix.pxd): every admission, prefill and finish asks it."""

    __slots__ = ("capacity", "block_tokens", "where", "key", "prv", "nxt", "pin", "size", "mine")
    __slots__ += ("hit_tokens", "prompt_tokens", "_prv", "_nxt", "_pin")

    def __init__(self, capacity: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS):
        if capacity < 1 or block_tokens < 1:
            raise ValueError(f"a prefix cache needs a block of a token or more (got {capacity}, {block_tokens})")
        self.capacity, self.block_tokens = capacity, block_tokens
        self.where: dict[int, int] = {}  # cached hash -> its slot
        self.key: list[int] = [0] * (capacity + 1)  # (any whole numbers a trace holds: Python ints)
        self.pin = array("q", bytes(8 * (capacity + 1)))  # running requests whose KV for it is the cache's copy
        self.prv = array("q", [capacity]) * (capacity + 1)  # (empty: the head links to itself)
        self.nxt = array("q", [capacity]) * (capacity + 1)
        self._pin, self._prv, self._nxt = self.pin, self.prv, self.nxt  # (the compiled module's typed views)
        self.size = 0  # slots handed out (0 .. size-1); when all are, a new entry takes its victim's
        self.mine: dict[int, tuple[int, ...]] = {}  # request -> the slots it pins
        self.hit_tokens = self.prompt_tokens = 0

    @property
    def entries(self) -> list[int]:
        """The cached hashes from least to most recently used."""
        out, nxt, head = [], self.nxt, self.capacity
        s = nxt[head]
        while s != head:
            out.append(self.key[s])
            s = nxt[s]
        return out

    @property
    def pins(self) -> dict[int, int]:
        """Pinned hash -> its pins."""
        return {self.key[s]: self.pin[s] for s in self.where.values() if self.pin[s]}

    @property
    def held(self) -> dict[int, tuple[int, ...]]:
        """Request -> the hashes it pins."""
        return {rid: tuple(self.key[s] for s in slots) for rid, slots in self.mine.items()}

    def lookup(self, hashes) -> int:
        """How many of `hashes`' leading blocks are cached (no side effect)."""
        where, k = self.where, 0
        for h in hashes:
            if h not in where:
                break
            k += 1
        return k

    def _to_end(self, s: int) -> None:
        """Slot s (linked) becomes the most recently used."""
        prv, nxt, head = self._prv, self._nxt, self.capacity
        last = prv[head]
        if last == s:
            return
        p, q = prv[s], nxt[s]
        nxt[p], prv[q] = q, p
        prv[s], nxt[s] = last, head
        nxt[last] = prv[head] = s

    def acquire(self, rid: int, hashes, k: int) -> None:
        """Request `rid` uses the cached first k blocks of `hashes`: they become the most recently
        used, and stay pinned until `release(rid)`."""
        if not k:
            return
        where, pin = self.where, self._pin
        slots = []
        for j in range(k):
            s = where[hashes[j]]
            self._to_end(s)
            pin[s] += 1
            slots.append(s)
        self.mine[rid] = tuple(slots)

    def release(self, rid: int) -> None:
        """Request `rid` finished or was preempted: its entries are unpinned (they stay cached)."""
        slots = self.mine.pop(rid, None)
        if slots is None:
            return
        pin = self._pin
        for s in slots:
            pin[s] -= 1

    def insert(self, hashes) -> None:
        """A prompt with these block hashes has been computed: each block becomes the most recently
        used, evicting the least recently used unpinned entry when the cache is full; a block that
        finds every entry pinned is not cached (nor are the blocks after it)."""
        where, key, pin, prv, nxt, head = self.where, self.key, self._pin, self._prv, self._nxt, self.capacity
        for h in hashes:
            s = where.get(h, -1)
            if s >= 0:
                self._to_end(s)
                continue
            if self.size < head:
                s = self.size
                self.size = s + 1
            else:
                s = nxt[head]  # the least recently used unpinned entry
                while s != head and pin[s]:
                    s = nxt[s]
                if s == head:
                    return
                del where[key[s]]
                p, q = prv[s], nxt[s]
                nxt[p], prv[q] = q, p
            key[s] = h
            where[h] = s
            last = prv[head]  # linked in as the most recently used
            prv[s], nxt[s] = last, head
            nxt[last] = prv[head] = s

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
