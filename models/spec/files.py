"""Bounded reads of regular files: every input file (scenario, sweep, trace, calibration, profile)
is read only if it is a regular file (checked before opening, symlinks followed, and again on the
open descriptor) and at most $WADILOCO_MAX_INPUT_BYTES long. A FIFO would block forever and
/dev/zero never ends; each kind of path that is not a file gets its own message.

A leaf: it imports nothing of the project but `models.errors`.
"""

from __future__ import annotations

import os
import re
import stat
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
        raise InputError(file, field, f"{path} {problem}" if str(file) != str(path) else problem)


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
