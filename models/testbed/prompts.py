"""The testbed's fixed prompt sets as token lengths per slot, and the output lengths of a batch.

They are registered as the prompt sets `short`, `mixed` and `long` (models.workload.prompt_sets,
by models/testbed/plugin.py), which a closed loop's `prompts:` names.

The testbed builds the prompt of slot k = (global request index) mod 4 from four short instructions
and one preamble (docs/sources.md, testbed 2.3). Character counts are exact in the artifact; token counts are
NOT tokenizer output: the artifact only has word-count estimates (~1.3 tokens per word). Every token
value below is such an estimate, with its source next to it.

Instruction lengths in characters, recovered from the artifact's exact prompt lengths [derived]:
long slot k = preamble (522, ends with "Incident notes: ", joined without a separator) + 24 copies of
instruction k joined by spaces = 522 + 24 L_k + 23, so L = 78 / 77 / 72 / 69 from 2417 / 2393 / 2273 /
2201; mixed (1, 4, 12, 24 copies, preamble in front from 12) then gives 78 / 311 / 1397 / 2201, the
artifact's mixed lengths exactly (tests/testbed/test_testbed_pure.py checks both).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wadiloco.models.workload import prompt_sets
from wadiloco.models.workload.prompt_sets import PromptSet

SLOTS = 4
PREAMBLE_CHARS = 522  # 2.3: 522 characters, 68 words, ~90 tokens
INSTRUCTION_CHARS = (78, 77, 72, 69)  # derived above from the long lengths
MIXED_REPEATS = (1, 4, 12, 24)  # 2.3; the preamble goes in front when the repeat count is >= 12
LONG_REPEATS = 24

# Tokens per character of the 2201-character prompt (mixed slot 3 = long slot 3), which the artifact
# puts at ~400 tokens (2.3). Used to scale the other long prompts; an estimate of an estimate.
TOKENS_PER_CHAR = 400 / 2201


def prompt_chars(repeats: int, preamble: bool, slot: int) -> int:
    """Characters of `repeats` copies of instruction `slot` joined by spaces, after the preamble."""
    body = repeats * INSTRUCTION_CHARS[slot] + (repeats - 1)
    return body + (PREAMBLE_CHARS if preamble else 0)


def _long_tokens() -> tuple[int, int, int, int]:
    chars = [prompt_chars(LONG_REPEATS, True, k) for k in range(SLOTS)]
    return tuple(round(c * TOKENS_PER_CHAR) for c in chars)  # 439 / 435 / 413 / 400


PROMPT_SETS: dict[str, PromptSet] = {
    "short": PromptSet(
        "short",
        chars=tuple(prompt_chars(1, False, k) for k in range(SLOTS)),
        tokens=(13, 13, 13, 13),
        # 2.3 says "about 12-14 tokens each" from 9-11 words. Scaling the characters by TOKENS_PER_CHAR
        # would give 14/14/13/13, but that ratio already contradicts the artifact's own ~13 for the
        # 78-character slot 0 (mixed), so no per-slot value is justified: 13 each.
        source="2.3: ~12-14 tokens each (word-count estimate); 13 each",
    ),
    "mixed": PromptSet(
        "mixed",
        chars=tuple(prompt_chars(r, r >= 12, k) for k, r in enumerate(MIXED_REPEATS)),
        tokens=(13, 50, 250, 400),
        source="2.3: 78 / 311 / 1397 / 2201 characters, 'about 13 / 50 / 250 / 400 tokens' (word-count estimate)",
    ),
    "long": PromptSet(
        "long",
        chars=tuple(prompt_chars(LONG_REPEATS, True, k) for k in range(SLOTS)),
        tokens=_long_tokens(),
        source="2.3: 2417 / 2393 / 2273 / 2201 characters ('about 400-440 tokens'), scaled by 400 tokens / 2201 chars",
    ),
}


def slots(index: int, size: int) -> np.ndarray:
    """Slots of the requests index .. index + size - 1 (the global index advances by the batch size)."""
    return prompt_sets.slots(index, size, SLOTS)


def prompt_batch(prompts: str | PromptSet, index: int, size: int) -> tuple[np.ndarray, int]:
    """Prompt tokens of one batch and the global index of the next batch."""
    ps = PROMPT_SETS[prompts] if isinstance(prompts, str) else prompts
    return ps.batch(index, size), index + size


# The 0.5B baseline (short, 32 new tokens): three slots reach 32 tokens and one stops at 22
# (2.3, derived: 3185 x (3 x 32 + 22) = 375830 output tokens, the reported total). WHICH slot stops
# early is not known; slot 3 is an arbitrary choice.
BASELINE_0P5B_OUTPUT = (32, 32, 32, 22)


def output_batch(max_new_tokens: int | Sequence[int], index: int, size: int) -> np.ndarray:
    """Output tokens of one batch: every request reaches `max_new_tokens` (2.3: 'almost always'),
    or a per-slot list such as BASELINE_0P5B_OUTPUT."""
    if not isinstance(max_new_tokens, int) and len(max_new_tokens) != SLOTS:
        raise ValueError(f"a per-slot output list needs {SLOTS} values >= 1, got {list(max_new_tokens)}")
    return prompt_sets.output_batch(max_new_tokens, index, size)
