"""`--set PATH=VALUE`: scenario fields changed on the command line, checked exactly as the YAML is.

An override is written into the parsed YAML mapping before validation, so every field of every
block works (blocks added later too) with no per-field code, and the schema's own checks and
messages apply. A block the file leaves out (it takes its defaults) is created for the field. An
error caused by an override names `--set` and the field; one in the file names the file.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from wadiloco.models.errors import InputError

CLI = "<command line>"


def parse_value(text: str, where: str) -> Any:
    """A command-line value read as YAML, as strictly as a scenario file's values are."""
    try:  # the strict reader (no duplicate keys, no numeric strings), where it exists
        from wadiloco.models.spec.schema import load_yaml_text
    except ImportError:  # pragma: no cover - older schema module
        import yaml

        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            raise InputError(CLI, where, f"cannot parse value {text!r}") from None
    else:
        value = load_yaml_text(text, CLI, where)
    from wadiloco.models.spec.schema import check_finite

    check_finite(value, CLI, where)
    return value


def parse_sets(items: list[str]) -> list[tuple[str, Any]]:
    """[(dotted path, value)] from `--set PATH=VALUE` items, in the order given."""
    out = []
    for it in items:
        path, eq, text = it.partition("=")
        path = path.strip()
        if not eq or not path:
            raise InputError(CLI, "--set", f"expected PATH=VALUE (e.g. horizon_s=300), got {it!r}")
        if any(not part for part in path.split(".")):
            raise InputError(CLI, f"--set {path}", "empty part in the dotted field path")
        out.append((path, parse_value(text.strip(), f"--set {path}")))
    return out


def apply_sets(data: Any, sets: list[tuple[str, Any]]) -> Any:
    """A copy of parsed YAML with each dotted path set; missing blocks become mappings."""
    if not sets or not isinstance(data, dict):
        return data
    data = copy.deepcopy(data)
    for path, value in sets:
        node = data
        parts = path.split(".")
        for i, part in enumerate(parts[:-1]):
            if node.get(part) is None:
                node[part] = {}
            elif not isinstance(node[part], dict):
                prefix = ".".join(parts[: i + 1])
                raise InputError(CLI, f"--set {path}", f"{prefix} is a value, not a block of fields")
            node = node[part]
        node[parts[-1]] = value
    return data


def _blames(where: str, path: str) -> bool:
    """Whether an error at field `where` can be the override of `path`'s doing."""
    w = where.split(" ")[0]
    return not w or w == path or w.startswith(path + ".") or path.startswith(w + ".")


def load_with_sets(path: str | Path, sets: list[tuple[str, Any]]):
    """The scenario file with the overrides applied, validated (models.spec.load: a Scenario)."""
    from wadiloco.models.spec.load import scenario_from_dict as from_dict
    from wadiloco.models.spec.schema import read_yaml

    p = Path(path)
    data = read_yaml(p)
    if not sets:
        return from_dict(data, p, p.parent)
    try:
        return from_dict(apply_sets(data, sets), p, p.parent)
    except InputError as e:
        mine = [q for q, _ in sets if _blames(e.where, q)]
        if not mine or e.file != str(p):
            raise
        try:  # the file alone may be at fault: then say so, naming the file
            from_dict(data, p, p.parent)
        except InputError:
            raise e from None
        raise InputError(CLI, f"--set {e.where or mine[-1]}", f"{e.message} (scenario {p})") from None


def add_set_argument(p) -> None:
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="change a scenario field, e.g. --set horizon_s=300 --set fleet.colocation=same_gpu "
        "(dotted YAML path, YAML value; repeatable; checked like the file)",
    )
