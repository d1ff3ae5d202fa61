"""Validation helpers every input schema shares: strict models, readable errors, YAML reading.

A leaf: it imports nothing of the project but `models.errors`, so any module that defines a
schema (the scenario, workload kinds, policy params, sweep files) can use it without pulling in
the registries that use those schemas.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from wadiloco.models.errors import InputError


class Strict(BaseModel):
    """Unknown keys, NaN and infinity are errors; assignments are validated too."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_assignment=True)


def format_validation_error(err: ValidationError, prefix: str = "") -> tuple[str, str]:
    """(dotted field, message) of the first problem, plus a count of the rest."""
    errs = err.errors()
    first = errs[0]
    loc = ".".join(str(p) for p in ((prefix,) if prefix else ()) + tuple(first["loc"]))
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown field (not part of the schema; check its spelling)"
    elif "input" in first and first["type"] not in ("missing",):
        msg = f"{msg} (got {first['input']!r})"
    if len(errs) > 1:
        msg += f" [and {len(errs) - 1} more problem(s)]"
    return loc, msg


def validate(model: type[BaseModel], data: Any, file: object, prefix: str = "") -> Any:
    """`model` built from `data`, or an InputError naming `file` and the dotted field."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        loc, msg = format_validation_error(e, prefix)
        raise InputError(file, loc, msg) from None


def read_yaml(path: str | Path) -> Any:
    p = Path(path)
    if not p.exists():
        raise InputError(p, "", "file not found")
    if p.is_dir():
        raise InputError(p, "", "is a folder, expected a YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(p, "", f"cannot read: {e}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(p, where, f"YAML syntax error: {problem}") from None


def check_finite(obj: Any, file: object, path: str = "") -> None:
    """Reject NaN and infinity anywhere in parsed YAML, free-form mappings included (pydantic
    checks only the fields it types)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        raise InputError(file, path or "<root>", f"must be a finite number (got {obj})")
    if isinstance(obj, dict):
        for k, v in obj.items():
            check_finite(v, file, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            check_finite(v, file, f"{path}[{i}]")
