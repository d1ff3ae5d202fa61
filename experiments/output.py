"""Writing result files atomically: a crash or a full disk never leaves a half-written file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from wadiloco.models.errors import InputError


def prepare_dir(path: str | Path) -> Path:
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(p, "--out", f"cannot create output folder: {e.strerror or e}") from None
    if not os.access(p, os.W_OK):
        raise InputError(p, "--out", "output folder is not writable")
    return p


def write_atomic(path: str | Path, data: str | bytes) -> None:
    path = Path(path)
    mode = "wb" if isinstance(data, bytes) else "w"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are meant to be shared
            with os.fdopen(fd, mode) as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise InputError(path, "", f"cannot write: {e.strerror or e}") from None


def to_jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and x != x:
        return None
    return x


def dumps(obj: Any) -> str:
    return json.dumps(to_jsonable(obj), indent=2, sort_keys=True, allow_nan=False)


def requests_csv(req: dict[str, np.ndarray]) -> str:
    """requests.csv: the request table under its labelled names (models.metrics.REQUEST_CSV_COLUMNS)."""
    import io

    import pandas as pd

    from wadiloco.models.metrics import labelled_requests

    buf = io.StringIO()
    pd.DataFrame(labelled_requests(req)).to_csv(buf, index=False, float_format="%.9g")
    return buf.getvalue()
