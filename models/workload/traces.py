"""Load real LLM-serving request traces (Azure CSV, Mooncake JSONL) into numpy arrays.

Traces come from outside the project, so every malformed input becomes an `InputError` that names
the file and the line (1-based, as an editor shows it) or the column, never a numpy/pandas traceback.
The common case is parsed vectorised (one numpy datetime parse for the whole Azure column); the
per-line checks are cheap string tests, so a 19k-row trace loads in a few tens of milliseconds.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wadiloco.models.errors import InputError
from wadiloco.models.spec.files import describe as describe_value
from wadiloco.models.spec.files import json_line, read_text

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
FORMATS = ("auto", "azure", "mooncake")

# Plausibility limits: past these a value is a unit mistake or corruption, not a real workload.
MAX_TOKENS = 10_000_000
MAX_SPAN_S = 30 * 86400.0

# Azure writes "YYYY-MM-DD HH:MM:SS.fffffff" (7 digits); accept any 0-9 digit fraction, a "T"
# separator and a UTC offset so other Azure-format exports load too.
_TS = re.compile(
    r"(?P<dt>(?P<year>\d{4})-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)"
    r"\s*(?P<tz>Z|[+-]\d{2}:?\d{2})?"
)
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


@dataclass(frozen=True, eq=False)
class Trace:
    """One trace: request arrival times (s from the first request) and token lengths, and (Mooncake)
    each row's prompt block hashes: `hash_ids`, one per 512-token block (models.engine.prefix), a tuple per
    row, or None for a trace without them."""

    t: np.ndarray  # float64, sorted, t[0] == 0
    prompt: np.ndarray  # int64 >= 1
    output: np.ndarray  # int64 >= 1
    source: str  # the file it came from
    hashes: tuple | None = None

    def __post_init__(self):
        for a in (self.t, self.prompt, self.output):
            a.setflags(write=False)  # frozen means the arrays too

    def __len__(self) -> int:
        return len(self.t)


# ---------------------------------------------------------------------------------------------
# entry point


def load_trace(path: str | Path, fmt: str = "auto") -> Trace:
    """Read an Azure CSV or Mooncake JSONL trace; `fmt="auto"` picks by extension, else sniffs."""
    p = Path(path)
    if fmt not in FORMATS:
        raise InputError(p, "format", f"unknown trace format {fmt!r}; expected one of {', '.join(FORMATS)}")
    text = _read_text(p)
    if not text.strip():
        raise InputError(p, "", "empty file: no requests")
    if fmt == "auto":
        fmt = _guess_format(p, text)
    return _load_azure(p, text) if fmt == "azure" else _load_mooncake(p, text)


# load_trace_cached: (path, format, size, mtime, ctime, inode) -> Trace, the oldest dropped first
_CACHE: dict[tuple, Trace] = {}
_CACHE_SIZE = 8


def load_trace_cached(path: str | Path, fmt: str = "auto") -> Trace:
    """`load_trace`, remembered for as long as the file is unchanged (same size, times, inode).

    A sweep, a capacity search or a what-if re-resolves the same scenario for every run; a Trace
    is read-only, so they can all share the one read. Errors are never cached."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return load_trace(p, fmt)  # it reports what is wrong with the path
    key = (str(p), fmt, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
    trace = _CACHE.get(key)
    if trace is None:
        trace = load_trace(p, fmt)
        if len(_CACHE) >= _CACHE_SIZE:
            del _CACHE[next(iter(_CACHE))]
        _CACHE[key] = trace
    return trace


def _read_text(p: Path) -> str:
    return read_text(p, "trace file")  # a regular file within the input size limit (models.spec.schema)


def _guess_format(p: Path, text: str) -> str:
    ext = p.suffix.lower()
    if ext == ".csv":
        return "azure"
    if ext in (".jsonl", ".json", ".ndjson"):
        return "mooncake"
    first = next((line for line in text.splitlines() if line.strip()), "").strip()
    if first.startswith("{"):
        return "mooncake"
    if "TIMESTAMP" in first or "," in first:
        return "azure"
    raise InputError(
        p,
        "line 1",
        "cannot tell the trace format: expected an Azure CSV header "
        f"({','.join(AZURE_COLUMNS)}) or Mooncake JSON lines; pass the format explicitly",
    )


# ---------------------------------------------------------------------------------------------
# Azure CSV


def _load_azure(p: Path, text: str) -> Trace:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
        while not any(h.strip() for h in header):  # leading blank lines
            header = next(reader)
    except StopIteration:
        raise InputError(p, "", "empty file: no header") from None
    except csv.Error as e:
        raise InputError(p, f"line {reader.line_num}", f"CSV syntax error: {e}") from None
    header_line = reader.line_num
    names = [h.strip() for h in header]
    missing = [c for c in AZURE_COLUMNS if c not in names]
    if missing:
        raise InputError(
            p,
            f"line {header_line}",
            f"missing column(s) {', '.join(missing)}: expected header "
            f"{','.join(AZURE_COLUMNS)} (the header line has {len(names)} field(s))",
        )
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(p, f"line {header_line}", f"column(s) {', '.join(dupes)} appear more than once")
    i_ts, i_p, i_o = (names.index(c) for c in AZURE_COLUMNS)
    width = len(names)

    lines: list[int] = []
    stamps: list[str] = []
    prompts: list[str] = []
    outputs: list[str] = []
    try:
        for row in reader:
            if len(row) != width:
                if not any(f.strip() for f in row):
                    continue  # blank line (e.g. a trailing newline)
                raise InputError(
                    p,
                    f"line {reader.line_num}",
                    f"expected {width} comma-separated fields ({','.join(names)}), found {len(row)}",
                )
            lines.append(reader.line_num)
            stamps.append(row[i_ts])
            prompts.append(row[i_p])
            outputs.append(row[i_o])
    except csv.Error as e:
        raise InputError(p, f"line {reader.line_num}", f"CSV syntax error: {e}") from None
    if not lines:
        raise InputError(p, "", "no requests: the file has a header but no data rows")

    ns = _parse_timestamps(p, stamps, lines)
    prompt = _parse_counts(p, prompts, lines, "ContextTokens")
    output = _parse_counts(p, outputs, lines, "GeneratedTokens")
    return _finish(p, ns, 1e9, prompt, output, lines, AZURE_COLUMNS)


def _parse_timestamps(p: Path, stamps: list[str], lines: list[int]) -> np.ndarray:
    """int64 ns since the epoch; regex per line (cheap) then one vectorised numpy parse."""
    naive: list[str] = []
    offsets: list[int] | None = None
    for k, s in enumerate(stamps):
        m = _TS.fullmatch(s.strip())
        # numpy silently wraps datetime64[ns] outside ~1678-2262 (and int64 ns differences
        # overflow past ~290 years), so bound the year first.
        if m is None or not 1970 <= int(m["year"]) <= 2200:
            raise InputError(
                p, f"line {lines[k]}", f"TIMESTAMP: cannot parse {_show(s)}; expected YYYY-MM-DD HH:MM:SS.fffffff"
            )
        naive.append(m["dt"])
        if m["tz"] is not None:
            if offsets is None:
                offsets = [0] * len(stamps)
            tz = m["tz"]
            if tz != "Z":
                sign = -1 if tz[0] == "-" else 1
                digits = tz[1:].replace(":", "")
                offsets[k] = sign * (int(digits[:2]) * 60 + int(digits[2:]))
    try:
        ns = np.array(naive, dtype="datetime64[ns]").view(np.int64)
    except ValueError:
        for k, s in enumerate(naive):  # slow path, only to name the bad line
            try:
                np.datetime64(s, "ns")
            except ValueError:
                raise InputError(p, f"line {lines[k]}", "TIMESTAMP: not a valid date and time") from None
        raise InputError(p, "column TIMESTAMP", "cannot parse the timestamps") from None
    if offsets is not None:  # local time minus its UTC offset = UTC
        ns = ns - np.asarray(offsets, dtype=np.int64) * 60_000_000_000
    return ns


def _parse_counts(p: Path, cells: list[str], lines: list[int], column: str) -> np.ndarray:
    """Whole, non-negative token counts; the fast path is plain digits."""
    try:
        return np.array([int(c) if _plain(c) else _count_slow(c) for c in cells], dtype=np.int64)
    except _BadCount:
        pass
    for k, c in enumerate(cells):  # find the first bad cell again, to name its line
        try:
            int(c) if _plain(c) else _count_slow(c)
        except _BadCount as e:
            raise InputError(p, f"line {lines[k]}", f"{column}: {e} (got {_show(c)})") from None
    raise AssertionError("unreachable")


def _plain(c: str) -> bool:
    return len(c) <= 18 and c.isascii() and c.isdigit()  # int() of a 5000-digit cell raises


class _BadCount(ValueError):
    pass


def _count_slow(cell: str) -> int:
    s = cell.strip()
    if not _NUMBER.fullmatch(s):
        raise _BadCount("not a number")
    x = float(s)
    if not math.isfinite(x) or abs(x) > MAX_TOKENS:
        raise _BadCount(f"implausible token count (limit {MAX_TOKENS:,})")
    if x < 0:
        raise _BadCount("negative token count")
    if not x.is_integer():
        raise _BadCount("not a whole number of tokens")
    return int(x)


# ---------------------------------------------------------------------------------------------
# Mooncake JSONL


def _load_mooncake(p: Path, text: str) -> Trace:
    lines: list[int] = []
    stamps: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    hashes: list[tuple[int, ...]] = []
    for n, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        obj = json_line(raw, p, n)  # strict: no NaN or Infinity, no integer past 20 digits
        if not isinstance(obj, dict):
            raise InputError(
                p,
                f"line {n}",
                f'expected a JSON object {{"timestamp": ..., "input_length": ..., '
                f'"output_length": ...}}, got {type(obj).__name__}',
            )
        for key in MOONCAKE_KEYS:
            if key not in obj:
                raise InputError(p, f"line {n}", f"missing key {key!r} (each line needs {', '.join(MOONCAKE_KEYS)})")
        ts = obj["timestamp"]
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not _finite(ts):
            raise InputError(p, f"line {n}", f"'timestamp' must be a number of milliseconds (got {_show(ts)})")
        hashes.append(_hash_ids(p, n, obj.get("hash_ids", [])))
        counts = []
        for key in MOONCAKE_KEYS[1:]:
            v = obj[key]
            problem = None
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                problem = "must be a whole number"
            elif not _finite(v) or abs(v) > MAX_TOKENS:
                problem = f"implausible token count (limit {MAX_TOKENS:,})"
            elif v < 0:
                problem = "negative token count"
            elif isinstance(v, float) and not v.is_integer():
                problem = "not a whole number of tokens"
            if problem:
                raise InputError(p, f"line {n}", f"{key!r}: {problem} (got {_show(v)})")
            counts.append(int(v))
        lines.append(n)
        stamps.append(float(ts))
        prompts.append(counts[0])
        outputs.append(counts[1])
    if not lines:
        raise InputError(p, "", "no requests: the file has no JSON lines")
    ms = np.asarray(stamps, dtype=np.float64)
    tr = _finish(
        p, ms, 1e3, np.asarray(prompts, dtype=np.int64), np.asarray(outputs, dtype=np.int64), lines, MOONCAKE_KEYS
    )
    return Trace(tr.t, tr.prompt, tr.output, tr.source, tuple(hashes) if any(hashes) else None)


def _hash_ids(p: Path, n: int, ids: object) -> tuple[int, ...]:
    """A row's `hash_ids`: a list of whole numbers (prefix block hashes), or an InputError."""
    if not isinstance(ids, list):
        raise InputError(p, f"line {n}", f"'hash_ids' must be a list (got {type(ids).__name__})")
    for v in ids:
        if isinstance(v, bool) or not isinstance(v, int) or abs(v) >= 2**63:
            raise InputError(p, f"line {n}", f"'hash_ids' must hold whole numbers (got {_show(v)})")
    return tuple(ids)


def _show(v: object) -> str:
    """A bad value described, not quoted: the path may name any file, and an error message must
    not print its contents (numbers in range are shown)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return "a number out of range" if not _finite(v) else f"{v:.6g}"
    return describe_value(v)


def _finite(x: int | float) -> bool:
    try:
        return math.isfinite(x) and abs(x) < 1e300
    except OverflowError:  # an int too large for a float
        return False


# ---------------------------------------------------------------------------------------------
# checks shared by both formats


def _finish(
    p: Path,
    exact: np.ndarray,
    per_s: float,
    prompt: np.ndarray,
    output: np.ndarray,
    lines: list[int],
    names: tuple[str, str, str],
) -> Trace:
    """Order, span and range checks, then rebase times to the first request.

    `exact` is the timestamp column in its native units (int64 ns, or ms) and is differenced
    before converting to float seconds, so 100-ns Azure stamps keep their precision.
    """
    ts_name, p_name, o_name = names
    back = np.flatnonzero(np.diff(exact) < 0)
    if back.size:
        k = int(back[0]) + 1
        raise InputError(
            p,
            f"line {lines[k]}",
            f"{ts_name} goes back in time: earlier than the previous "
            f"request (line {lines[k - 1]}); traces must be sorted by time",
        )
    span = float(exact[-1] - exact[0]) / per_s
    if span > MAX_SPAN_S:
        k = int(np.searchsorted(exact, exact[0] + MAX_SPAN_S * per_s, side="right"))
        raise InputError(
            p,
            f"line {lines[k]}",
            f"{ts_name} is {span / 86400:.1f} days after the first request "
            f"(line {lines[0]}); traces longer than 30 days are rejected as implausible",
        )
    for arr, name, low in ((prompt, p_name, 1), (output, o_name, 1)):
        bad = np.flatnonzero((arr < low) | (arr > MAX_TOKENS))
        if bad.size:
            k = int(bad[0])
            v = int(arr[k])
            why = f"must be at least {low}" if v < low else f"implausible token count (limit {MAX_TOKENS:,})"
            raise InputError(p, f"line {lines[k]}", f"{name}: {why} (got {v})")
    t = (exact - exact[0]).astype(np.float64) / per_s
    return Trace(t=t, prompt=prompt, output=output, source=str(p))


# ---------------------------------------------------------------------------------------------
# summary


def describe(trace: Trace) -> dict:
    """Headline numbers for `wadiloco trace`: size, rate, burstiness, token lengths.

    mean_rate is (rows - 1) / span: the rate that, looped with one mean gap between copies,
    replays the trace at exactly its own pace. Arrival CV is the std/mean of inter-arrival gaps
    (1 for Poisson, > 1 for bursty traffic). Values that need two or more requests are None.
    """
    n = len(trace.t)
    span = float(trace.t[-1]) if n else 0.0
    gaps = np.diff(trace.t)
    out = {
        "source": trace.source,
        "rows": n,
        "span_s": span,
        "mean_rate": (n - 1) / span if span > 0 else None,
        "arrival_cv": float(gaps.std() / gaps.mean()) if gaps.size and gaps.mean() > 0 else None,
        "zero_gaps": int(np.count_nonzero(gaps == 0)),
    }
    for name, arr in (("prompt", trace.prompt), ("output", trace.output)):
        out[f"{name}_mean"] = float(arr.mean()) if n else None
        out[f"{name}_median"] = float(np.median(arr)) if n else None
        out[f"{name}_p99"] = float(np.percentile(arr, 99)) if n else None
        out[f"{name}_max"] = int(arr.max()) if n else None
    return out
