"""Validation helpers every input schema shares: strict models, readable errors, bounded reads, YAML.

A leaf: it imports nothing of the project but `models.errors` and `models.spec.files` (bounded reads),
so any module that defines a schema (the scenario, workload kinds, policy params, sweep files) can
use it without pulling in the registries that use those schemas.

Input files are read through models.spec.files: regular files only, at most $WADILOCO_MAX_INPUT_BYTES.
YAML is read as YAML 1.2's core schema, strictly: `true`/`false` are the only booleans, numbers
are decimal (`0x1E`, `1_000`, `010` and `1:30` stay strings, which a number field rejects), a key
given twice is an error, and the document's size with every alias expanded, its nesting depth and
its integers are capped before anything walks it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from wadiloco.models.errors import InputError
from wadiloco.models.spec.files import (  # noqa: F401 - re-exported: the read helpers every schema's reader uses
    MAX_INPUT_ENV,
    check_input,
    describe,
    input_problem,
    max_input_bytes,
    not_regular,
    read_input,
    read_text,
)

MAX_YAML_NODES = 200_000  # scalars and collections, every alias expanded (a 100k-seed list fits)
MAX_YAML_DEPTH = 64
MAX_INT = 2**63 - 1  # what a seed, a count or a size can be; past it a number is a typo


class Strict(BaseModel):
    """Unknown keys, NaN and infinity are errors; assignments are validated too. Strict types: a
    number field takes numbers only (an int where a float is expected, never a bool or a string),
    a bool field only true or false."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_assignment=True, strict=True)


def format_validation_error(err: ValidationError, prefix: str = "", quote: bool = True) -> tuple[str, str]:
    """(dotted field, message) of the first problem, plus a count of the rest. The value at fault is
    shown (`quote`; else only described: an auxiliary file's content is never printed), except
    where a validator of a whole mapping said what is wrong with it."""
    errs = err.errors()
    first = errs[0]
    loc = ".".join(str(p) for p in ((prefix,) if prefix else ()) + tuple(first["loc"]))
    msg = first["msg"]
    given = first.get("input")
    own_words = first["type"] in ("value_error", "assertion_error") and isinstance(given, (dict, list))
    if first["type"] == "extra_forbidden":
        msg = "unknown field (not part of the schema; check its spelling)"
    elif "input" in first and first["type"] not in ("missing",) and not own_words:
        msg = f"{msg} (got {_short(given) if quote else describe(given)})"
    if len(errs) > 1:
        msg += f" [and {len(errs) - 1} more problem(s)]"
    return loc, msg


def _short(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return f"a {'mapping' if isinstance(v, dict) else 'list'} of {len(v)} item(s)"
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def validate(model: type[BaseModel], data: Any, file: object, prefix: str = "", quote: bool = True) -> Any:
    """`model` built from `data`, or an InputError naming `file` and the dotted field. Strict types
    even for a model that is not `Strict` (a policy's params): no bool or text as a number."""
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as e:
        loc, msg = format_validation_error(e, prefix, quote)
        raise InputError(file, loc, msg) from None


# ---- YAML: the 1.2 core schema, strictly, with size caps ----------------------------------------

_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(
    r"[-+]?(?:[0-9]+\.[0-9]*(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+|\.(?:inf|Inf|INF))"
    r"|\.(?:nan|NaN|NAN)"
)
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_IMPLICIT = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """SafeLoader (libyaml's parser where PyYAML has it: 15x faster than the pure-Python one, which
    matters when a huge document must be refused in time) with YAML 1.2 core booleans and numbers,
    duplicate keys refused."""

    yaml_implicit_resolvers = {
        k: [(tag, rx) for tag, rx in v if tag not in _IMPLICIT]
        for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: SafeLoader reports it
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {_short(key)} (first given on line {first + 1})",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        text = self.construct_scalar(node)
        if not _INT.fullmatch(text) or len(text) > 20 or abs(int(text)) > MAX_INT:
            why = "out of range (at most 2^63 - 1 in size)" if _INT.fullmatch(text) else "not a decimal integer"
            raise yaml.constructor.ConstructorError(None, None, f"integer {_short(text)} {why}", node.start_mark)
        return int(text)

    def construct_yaml_bool(self, node):
        text = self.construct_scalar(node)
        if text not in _BOOL:
            raise yaml.constructor.ConstructorError(
                None, None, f"{_short(text)} is not a boolean (true or false)", node.start_mark
            )
        return _BOOL[text]


_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(f"(?:{'|'.join(_BOOL)})$"), list("tTfF"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(f"(?:{_INT.pattern})$"), list("-+0123456789"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(f"(?:{_FLOAT.pattern})$"), list("-+0123456789."))
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:bool", _Loader.construct_yaml_bool)


def _check_shape(text: str) -> None:
    """Depth and expanded size from the event stream (aliases counted at their anchor's size, so a
    'billion laughs' is refused in time linear in its text); raises a YAMLError-like ValueError."""
    sizes: dict[str, int] = {}
    stack: list[list] = [[None, 0]]
    total = 0
    for ev in yaml.parse(text, Loader=_Loader):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if len(stack) > MAX_YAML_DEPTH:
                raise _ShapeError(ev.start_mark, f"nested more than {MAX_YAML_DEPTH} levels deep")
            stack.append([ev.anchor, 1])
            n = 1
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, size = stack.pop()
            if anchor:
                sizes[anchor] = size
            stack[-1][1] += size
            continue
        elif isinstance(ev, yaml.ScalarEvent):
            n = 1
            if ev.anchor:
                sizes[ev.anchor] = 1
            stack[-1][1] += 1
        elif isinstance(ev, yaml.AliasEvent):
            n = sizes.get(ev.anchor, 1)
            stack[-1][1] += n
        else:
            continue
        total += n
        if total > MAX_YAML_NODES:
            raise _ShapeError(
                ev.start_mark, f"more than {MAX_YAML_NODES:,} values once its aliases (*name) are expanded"
            )


class _ShapeError(Exception):
    def __init__(self, mark, problem: str):
        self.problem_mark, self.problem = mark, problem


def load_yaml_text(text: str, file: object, where: str = "", quote: bool = True) -> Any:
    """Parsed YAML (one document), or an InputError naming `file` and `where` (or the line); without
    `quote`, the parser's message keeps no quoted piece of the text."""
    try:
        _check_shape(text)
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except (yaml.YAMLError, _ShapeError) as e:
        mark = getattr(e, "problem_mark", None)
        line = f"line {mark.line + 1}" if mark is not None else ""
        at = f"{where} ({line})" if where and line and not str(where).startswith("line") else where or line
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        if not quote:
            problem = re.sub(r"'[^']*'|\"[^\"]*\"", "(...)", problem)
        raise InputError(file, at, f"YAML: {problem}") from None
    except RecursionError:
        raise InputError(file, where, f"YAML: nested more than {MAX_YAML_DEPTH} levels deep") from None


def read_yaml(path: str | Path, quote: bool = True) -> Any:
    p = Path(path)
    return load_yaml_text(read_text(p, "YAML file"), p, quote=quote)


def check_finite(obj: Any, file: object, path: str = "", booleans: bool = True) -> None:
    """Reject NaN, infinity and out-of-range integers anywhere in parsed YAML, free-form mappings
    included (pydantic checks only the fields it types), and booleans too where none belongs (a
    measurements file). Each shared node (a YAML alias) is walked once; the walk is iterative, so
    depth costs no stack."""
    seen: set[int] = set()
    todo: list[tuple[Any, str]] = [(obj, path)]
    while todo:
        o, where = todo.pop()
        if isinstance(o, bool) and not booleans:
            raise InputError(file, where or "<root>", "must be a number, not a boolean")
        if isinstance(o, float) and not math.isfinite(o):
            raise InputError(file, where or "<root>", f"must be a finite number (got {o})")
        if isinstance(o, int) and not isinstance(o, bool) and abs(o) > MAX_INT:
            raise InputError(file, where or "<root>", "integer out of range (at most 2^63 - 1 in size)")
        if isinstance(o, (dict, list)):
            if id(o) in seen:
                continue
            seen.add(id(o))
            items = o.items() if isinstance(o, dict) else enumerate(o)
            kids = [
                (v, (f"{where}.{k}" if where else str(k)) if isinstance(o, dict) else f"{where}[{k}]") for k, v in items
            ]
            todo.extend(reversed(kids))
