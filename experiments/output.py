"""Writing results: atomically, only to regular files, and only into folders that are ours.

- `write_atomic`: a temp file next to the target, fsynced, renamed over it, so a crash or a full
  disk never leaves a half-written file. The target is resolved first: a symlink is written
  through (the link stays a link), a device, FIFO, socket or folder is refused (a rename would
  replace it), and temp files carry this tool's marker (`.<name>.wadiloco-tmp.<8 chars>`) so
  that a later clean-up removes only its own.
- `ResultDir`: the folder of `run --out` or `whatif --out`. It is checked before any work starts
  and created only when there is something to write: a new or empty folder, or one this tool
  wrote the same kind of result into (with `--force`); never a folder holding anything else. On
  failure it removes what it created, and only that.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from wadiloco.models.errors import InputError
from wadiloco.models.spec.schema import not_regular, read_text

TEMP_MARK = "wadiloco-tmp"  # in every temp file name: .<name>.wadiloco-tmp.<8 random chars>
RESULT_MARK = ".wadiloco-result"  # in a result folder: the kind of result this tool wrote there


def prepare_dir(path: str | Path, field: str = "--out") -> Path:
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(p, field, f"cannot create output folder: {e.strerror or e}") from None
    if not os.access(p, os.W_OK):
        raise InputError(p, field, "output folder is not writable")
    return p


def write_target(path: str | Path, field: str = "") -> Path:
    """The file a write to `path` lands in: symlinks resolved; an InputError if it is not (or would
    not be) a regular file in an existing folder."""
    p = Path(path)
    real = Path(os.path.realpath(p))
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise InputError(p, field, f"cannot write: {e.strerror or e}") from None
    if st is None and p.is_symlink():
        raise InputError(p, field, f"is a symlink to a missing file ({os.readlink(p)}); give the file itself")
    why = not_regular(st.st_mode) if st is not None else None
    if why:
        link = f" (through the symlink {p})" if real != p.absolute() else ""
        raise InputError(real, field, f"{why}{link}; results are written only to regular files")
    if not real.parent.is_dir():
        raise InputError(p, field, f"cannot write: the folder {real.parent} does not exist")
    return real


def write_atomic(path: str | Path, data: str | bytes) -> None:
    target = write_target(path)
    mode = "wb" if isinstance(data, bytes) else "w"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{TEMP_MARK}.", dir=target.parent)
        try:
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are meant to be shared
            with os.fdopen(fd, mode) as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise InputError(path, "", f"cannot write: {e.strerror or e}") from None


class ResultDir:
    """An output folder for one kind of result ("run", "whatif"); see the module docstring."""

    def __init__(self, path: str | Path, kind: str, force: bool = False, field: str = "--out"):
        self.path, self.kind, self.field = Path(path), kind, field
        self.created: list[Path] = []  # folders this command made, outermost first
        self.written: list[Path] = []  # files this command wrote that did not exist before
        self._check(force)

    def _check(self, force: bool) -> None:
        p = self.path
        if p.is_symlink() and not p.exists():
            raise InputError(p, self.field, f"is a symlink to a missing folder ({os.readlink(p)})")
        if not p.exists():
            parent = next((a for a in p.absolute().parents if a.exists()), None)
            if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
                raise InputError(p, self.field, f"cannot create output folder here ({parent} is not a writable folder)")
            return
        if not p.is_dir():
            why = not_regular(p.stat().st_mode) or "is a file"
            raise InputError(p, self.field, f"{why}, expected an output folder")
        try:
            names = sorted(x.name for x in p.iterdir())
        except OSError as e:
            raise InputError(p, self.field, f"cannot read the output folder: {e.strerror or e}") from None
        if names and self.owner() != self.kind:
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            raise InputError(
                p,
                self.field,
                f"is not empty ({shown}) and holds no {self.kind} result of this tool; "
                "give a new or empty folder (nothing was written)",
            )
        if names and not force:
            raise InputError(
                p,
                self.field,
                f"already holds a {self.kind} result; pass --force to overwrite it, or give another folder",
            )
        if not os.access(p, os.W_OK | os.X_OK):
            raise InputError(p, self.field, "output folder is not writable")

    def owner(self) -> str | None:
        """The kind of result this tool recorded in the folder, if any."""
        mark = self.path / RESULT_MARK
        try:
            st = mark.lstat()
            if not stat.S_ISREG(st.st_mode) or st.st_size > 100:
                return None
            return mark.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None

    def open(self) -> Path:
        """Create the folder (and the missing parents), recording what was made."""
        missing = [a for a in (self.path, *self.path.absolute().parents) if not a.exists()]
        prepare_dir(self.path, self.field)
        self.created = [Path(a) for a in reversed(missing)]
        self.write(RESULT_MARK, self.kind + "\n")
        return self.path

    def write(self, name: str, data: str | bytes) -> None:
        f = self.path / name
        new = not f.exists()
        write_atomic(f, data)
        if new:
            self.written.append(f)

    def discard(self) -> None:
        """Remove what this command wrote and made; older files and folders stay."""
        for f in reversed(self.written):
            f.unlink(missing_ok=True)
        for d in reversed(self.created):
            try:
                d.rmdir()
            except OSError:
                break  # not empty: someone else's, now


def to_jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None  # JSON has no NaN or infinity
    return x


def dumps(obj: Any) -> str:
    return json.dumps(to_jsonable(obj), indent=2, sort_keys=True, allow_nan=False)


def requests_csv(req: dict[str, np.ndarray]) -> str:
    """requests.csv: the request table under its labelled names (models.results.metrics.REQUEST_CSV_COLUMNS)."""
    import io

    import pandas as pd

    from wadiloco.models.results.metrics import labelled_requests

    buf = io.StringIO()
    pd.DataFrame(labelled_requests(req)).to_csv(buf, index=False, float_format="%.9g")
    return buf.getvalue()


def replace_section(path: str | Path, start: str, end: str, text: str) -> None:
    """Rewrite what lies between a file's `start` and `end` markers (the README section a table
    command regenerates), atomically; each marker must appear once, `start` first. The page is read
    as every input is (a regular file within the size limit: a FIFO or /dev/zero is refused)."""
    p = Path(path)
    body = read_text(p, "Markdown page")
    i, j = body.find(start), body.find(end)
    if i < 0 or j < 0:
        raise InputError(p, "--doc", f"markers {start} and {end} not found; add them where the table goes")
    if j < i or body.count(start) != 1 or body.count(end) != 1:
        raise InputError(p, "--doc", f"expected exactly one {start} followed by one {end}")
    write_atomic(p, body[: i + len(start)] + "\n" + text.rstrip("\n") + "\n" + body[j:])


def read_table(path: str | Path, columns: tuple[str, ...] | list[str], what: str):
    """A CSV table another command wrote (a sweep's runs.csv, summary.csv), read as every input is and
    checked to have `columns`: a foreign file is an input error naming it and what it lacks."""
    import pandas as pd

    p = Path(path)
    text = read_text(p, what)
    try:
        df = pd.read_csv(io.StringIO(text), keep_default_na=True)
    except (ValueError, pd.errors.ParserError) as e:  # EmptyDataError is a ValueError
        raise InputError(p, "", f"not a {what}: not a CSV table ({type(e).__name__})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise InputError(p, "", f"not a {what}: it has no column {shown}")
    return df
