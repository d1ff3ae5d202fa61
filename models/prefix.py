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

from collections import OrderedDict

MOONCAKE_BLOCK_TOKENS = 512  # Mooncake FAST'25 trace README: hash_ids are 512-token prefix blocks


class PrefixCache:
    """An LRU of block hashes with ref-counted pins. `entries` runs from least to most recently used."""

    __slots__ = ("capacity", "block_tokens", "entries", "pins", "held", "hit_tokens", "prompt_tokens")

    def __init__(self, capacity: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS):
        if capacity < 1 or block_tokens < 1:
            raise ValueError(f"a prefix cache needs a block of a token or more (got {capacity}, {block_tokens})")
        self.capacity, self.block_tokens = capacity, block_tokens
        self.entries: OrderedDict[int, None] = OrderedDict()
        self.pins: dict[int, int] = {}  # hash -> running requests whose KV for it is the cache's copy
        self.held: dict[int, tuple[int, ...]] = {}  # request -> the entries it pins
        self.hit_tokens = self.prompt_tokens = 0

    def lookup(self, hashes) -> int:
        """How many of `hashes`' leading blocks are cached (no side effect)."""
        entries, k = self.entries, 0
        for h in hashes:
            if h not in entries:
                break
            k += 1
        return k

    def acquire(self, rid: int, hashes, k: int) -> None:
        """Request `rid` uses the cached first k blocks of `hashes`: they become the most recently
        used, and stay pinned until `release(rid)`."""
        if not k:
            return
        entries, pins = self.entries, self.pins
        mine = tuple(hashes[:k])
        for h in mine:
            entries.move_to_end(h)
            pins[h] = pins.get(h, 0) + 1
        self.held[rid] = mine

    def release(self, rid: int) -> None:
        """Request `rid` finished or was preempted: its entries are unpinned (they stay cached)."""
        mine = self.held.pop(rid, None)
        if mine is None:
            return
        pins = self.pins
        for h in mine:
            left = pins[h] - 1
            if left:
                pins[h] = left
            else:
                del pins[h]

    def insert(self, hashes) -> None:
        """A prompt with these block hashes has been computed: each block becomes the most recently
        used, evicting the least recently used unpinned entry when the cache is full; a block that
        finds every entry pinned is not cached (nor are the blocks after it)."""
        entries, pins, cap = self.entries, self.pins, self.capacity
        for h in hashes:
            if h in entries:
                entries.move_to_end(h)
                continue
            if len(entries) >= cap:
                victim = None  # the least recently used unpinned entry
                for e in entries:
                    if e not in pins:
                        victim = e
                        break
                if victim is None:
                    return
                del entries[victim]
            entries[h] = None

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
