"""The policy registry: names to classes, and the one place a policy's params are validated."""

from __future__ import annotations

from typing import Any

from wadiloco.models.errors import InputError
from wadiloco.models.plugins import Registry
from wadiloco.models.policies.base import Params, Policy, PolicyContext
from wadiloco.models.spec.schema import validate

POLICIES: Registry[str, type[Policy]] = Registry("policy")
RENAMED = {"offline_calibrated": "overlap_oracle"}  # old name -> new: named in the error for the old one


def unknown_policy(name: str) -> str:
    """The message for a name no policy is registered under (a renamed one says its new name)."""
    hint = f" (renamed {RENAMED[name]!r})" if name in RENAMED else ""
    return f"unknown policy {name!r}{hint}; known: {', '.join(sorted(POLICIES))}"


def register(cls: type[Policy]) -> type[Policy]:
    if not cls.name:
        raise ValueError("a policy needs a name")
    has_ref = "reference" in cls.Params.model_fields
    if cls.takes_reference != has_ref:
        raise ValueError(
            f"policy {cls.name!r}: takes_reference = {cls.takes_reference} but its Params "
            f"{'have' if has_ref else 'lack'} a `reference` field"
        )
    POLICIES[cls.name] = cls
    return cls


def parse_policy(
    name: str, params: dict[str, Any] | None, file: object = "<policy>", where: str = "policy"
) -> tuple[type[Policy], Params]:
    """Validate a policy name and its params; returns (class, params object)."""
    if name not in POLICIES:
        raise InputError(file, f"{where}.name", unknown_policy(name))
    cls = POLICIES[name]
    if params is not None and not isinstance(params, dict):
        raise InputError(file, f"{where}.params", "must be a mapping of parameter names to values")
    if params and not cls.Params.model_fields:
        raise InputError(file, f"{where}.params", f"{name} takes no parameters (got {', '.join(map(str, params))})")
    return cls, validate(cls.Params, params or {}, file, f"{where}.params")


def make_policy(name: str, params: dict[str, Any] | None, ctx: PolicyContext, file: object = "<policy>") -> Policy:
    cls, p = parse_policy(name, params, file)
    return cls(p, ctx)


def describe_policies() -> list[dict[str, Any]]:
    out = []
    for name in sorted(POLICIES):
        cls = POLICIES[name]
        fields = {
            k: (f.get_default(call_default_factory=True) if not f.is_required() else "<required>")
            for k, f in cls.Params.model_fields.items()
        }
        out.append(
            {
                "name": name,
                "oracle": cls.oracle,
                "control": cls.control,
                "takes_reference": cls.takes_reference,
                "summary": cls.summary,
                "params": fields,
            }
        )
    return out
