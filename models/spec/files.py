"""The one reader of input files: every file a command reads (scenario, sweep, trace, calibration,
profile, windows log, replay schedule, plugin, a page whose section a table replaces) is read only
if it is a regular file (checked before opening, symlinks followed, and again on the open
descriptor) and at most $WADILOCO_MAX_INPUT_BYTES long. A FIFO would block forever and /dev/zero
never ends; each kind of path that is not a file gets its own message.

The line-oriented auxiliary formats (one number per line, JSON lines) are parsed here too, strictly:
a number is finite, in its range, never a boolean, and no digit string is long enough to overflow.
Their errors name the file, the line and the field, and describe a bad value without quoting it:
the path may name any file (a password file, /proc/self/environ), and a message must not print it.

A leaf: it imports nothing of the project but `models.errors`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from wadiloco.models.errors import InputError

MAX_INPUT_ENV = "WADILOCO_MAX_INPUT_BYTES"
DEFAULT_MAX_INPUT_BYTES = 256 * 2**20


def max_input_bytes() -> int:
    raw = os.environ.get(MAX_INPUT_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_INPUT_BYTES
    if not re.fullmatch(r"[0-9]{1,18}", raw) or int(raw) < 1:
        raise InputError(f"${MAX_INPUT_ENV}", "", f"must be a whole number of bytes >= 1 (got {raw!r})")
    return int(raw)


_KINDS = (
    (stat.S_ISDIR, "is a folder"),
    (stat.S_ISFIFO, "is a FIFO (named pipe): reading it would wait for a writer"),
    (stat.S_ISCHR, "is a character device (like /dev/zero or a terminal)"),
    (stat.S_ISBLK, "is a block device"),
    (stat.S_ISSOCK, "is a socket"),
)


def not_regular(mode: int) -> str | None:
    """What a file of this mode is, if it is not a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((why for test, why in _KINDS if test(mode)), "is not a regular file")


def input_problem(path: str | Path, what: str = "file") -> str | None:
    """Why `path` cannot be read as an input (None if it can): missing, not a regular file (symlinks
    followed), or over the size limit."""
    p = Path(path)
    link = f" (a symlink to {os.readlink(p)})" if p.is_symlink() else ""
    try:
        st = p.stat()
    except FileNotFoundError:
        return f"is a symlink to a missing file ({os.readlink(p)})" if link else f"{what} not found"
    except OSError as e:
        return f"cannot read: {e.strerror or e}"
    why = not_regular(st.st_mode)
    if why:
        return f"{why}{link}, expected a {what}"
    limit = max_input_bytes()
    if st.st_size > limit:
        return (
            f"is {st.st_size:,} bytes, more than the input size limit of {limit:,} bytes "
            f"(set ${MAX_INPUT_ENV} to raise it)"
        )
    return None


def check_input(path: str | Path, file: object, field: str, what: str = "file") -> None:
    """An InputError naming `file` and `field` (and the path) if `path` cannot be read as an input."""
    problem = input_problem(path, what)
    if problem:
        sep = " " if problem.startswith("is ") else ": "
        raise InputError(file, field, f"{path}{sep}{problem}" if str(file) != str(path) else problem)


def read_input(path: str | Path, what: str = "file") -> bytes:
    """The bytes of a regular file of at most $WADILOCO_MAX_INPUT_BYTES; anything else is an InputError."""
    p = Path(path)
    check_input(p, p, "", what)
    limit = max_input_bytes()
    try:
        # O_NONBLOCK: if a FIFO replaced the file since the check, opening it must not wait
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise InputError(p, "", f"cannot read: {e.strerror or e}") from None
    try:
        why = not_regular(os.fstat(fd).st_mode)
        if why:
            raise InputError(p, "", f"{why}, expected a {what}")
        chunks, n = [], 0
        while n <= limit:
            b = os.read(fd, min(1 << 20, limit + 1 - n))
            if not b:
                break
            chunks.append(b)
            n += len(b)
    except OSError as e:
        raise InputError(p, "", f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if n > limit:
        raise InputError(p, "", f"grew past the input size limit of {limit:,} bytes while being read")
    return b"".join(chunks)


def read_text(path: str | Path, what: str = "file") -> str:
    raw = read_input(path, what)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise InputError(path, f"line {line}", "not UTF-8 text (is this a compressed or binary file?)") from None


# ---- auxiliary files a scenario or a policy names -----------------------------------------------


def beside(name: str | Path, base_dir: str | Path) -> Path:
    """A path as a scenario names it: absolute as given, relative from the scenario's folder (never
    from the working folder)."""
    p = Path(name).expanduser()
    return p if p.is_absolute() else Path(base_dir) / p


@contextlib.contextmanager
def named_by(file: object, field: str) -> Iterator[None]:
    """Errors of a file another one names come out naming both: `file: field: path: line N: why`."""
    try:
        yield
    except InputError as e:
        inner = f"{e.file}: {e.where}" if e.where else e.file
        if e.file == str(file):
            raise
        raise InputError(file, field, f"{inner}: {e.message}") from None


def describe(v: object) -> str:
    """A bad value described, never quoted: its kind and size."""
    if isinstance(v, Unreadable):
        return v.what
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return f"a text of {len(v):,} character(s)" if v.strip() else "an empty text"
    if v is None:
        return "null"
    return f"a JSON {'object' if isinstance(v, dict) else 'list' if isinstance(v, list) else type(v).__name__}"


def strict_number(v: object, lo: float = -math.inf, hi: float = math.inf) -> tuple[float | None, str]:
    """(the value as a float, "") if `v` is a finite number (not a boolean) in [lo, hi], else (None,
    why): the problem in words, without the value."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None, f"must be a number (got {describe(v)})"
    try:
        x = float(v)
    except OverflowError:  # an int too large for a float
        return None, "is out of range (too many digits)"
    if not math.isfinite(x):
        return None, "must be a finite number"
    if not lo <= x <= hi:
        return None, f"is out of range (from {lo:g} to {hi:g})"
    return x, ""


_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,4})?")


def number_lines(path: str | Path, field: str, lo: float = -math.inf, hi: float = math.inf, what: str = "file"):
    """[(line, value)] of a file of one decimal number per line (blank lines skipped)."""
    out = []
    for n, line in enumerate(read_text(path, what).splitlines(), 1):
        text = line.strip()
        if not text:
            continue
        if not _PLAIN_NUMBER.fullmatch(text):
            raise InputError(path, f"line {n}", f"{field}: not a decimal number (got {describe(text)})")
        x, why = strict_number(float(text), lo, hi)
        if why:
            raise InputError(path, f"line {n}", f"{field} {why}")
        out.append((n, x))
    return out


class Unreadable:
    """A JSON value no number this reader takes: NaN, Infinity, or an integer too long to be one. It
    is no int or float, so every field check refuses it and says what it was (`describe`)."""

    __slots__ = ("what",)

    def __init__(self, what: str):
        self.what = what


MAX_INT_DIGITS = 300  # past a float's range: an integer this long is no count or time


def _constant(name: str) -> Unreadable:
    return Unreadable(name)


def _bounded_int(text: str) -> int | Unreadable:
    n = len(text.lstrip("-"))
    return int(text) if n <= MAX_INT_DIGITS else Unreadable(f"an integer of {n:,} digits")


def json_text(text: str, path: str | Path, where: str = "") -> object:
    """A JSON document (or one line of a JSON-lines file), strictly: NaN, Infinity and integers of
    more than 300 digits come back as `Unreadable` values, which every field check refuses by name;
    a syntax error says where, never what the text holds."""
    try:
        return json.loads(text, parse_constant=_constant, parse_int=_bounded_int)
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        msg = getattr(e, "msg", None) or (str(e).splitlines() or [type(e).__name__])[0]
        at = f" at line {e.lineno}, column {e.colno}" if isinstance(e, json.JSONDecodeError) and not where else ""
        raise InputError(path, where, f"not valid JSON ({msg[:120]}{at})") from None


def json_line(text: str, path: str | Path, n: int) -> object:
    """One line of a JSON-lines file (`json_text`)."""
    return json_text(text, path, f"line {n}")


def json_records(path: str | Path, what: str = "file", text: str | None = None) -> list[tuple[int, dict]]:
    """[(line, object)] of a JSON-lines file (blank lines skipped); each line must be a JSON object."""
    text = read_text(path, what) if text is None else text
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        obj = json_line(line, path, n)
        if not isinstance(obj, dict):
            raise InputError(path, f"line {n}", f"expected a JSON object (got {describe(obj)})")
        out.append((n, obj))
    return out
