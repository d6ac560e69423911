"""Settings errors a user can act on (issue 13 item 8): an unknown key names the nearest valid one.

Every settings model of :mod:`pgrag_dag.config` forbids unknown keys (``extra="forbid"``), and so do the
operators' option models (:mod:`pgrag_dag.operators`); pydantic reports such a key as ``extra_forbidden``
at its location. :func:`describe` turns one pydantic error into one line —
``embedding: unknown key 'modle' (did you mean 'model'?)`` — by walking the location down the model's
fields to the model that refused the key and offering its closest field name (:mod:`difflib`).
"""

from __future__ import annotations

import difflib
import os
import types
from collections.abc import Mapping, Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails

_LISTED = 12  # valid keys listed when none is close


def describe(
    err: ErrorDetails, model: type[BaseModel], *, top: str = "settings", env_prefix: str | None = None
) -> str:
    """One line for pydantic error ``err`` raised while validating ``model``: ``"<where>: <what>"``.

    ``<where>`` is the error's location joined by ``.`` (``top`` for the model itself); an unknown key
    reads ``<where>: unknown key 'x' (did you mean 'y'?)``, or lists the valid keys when none is close,
    and with ``env_prefix`` (``"PGRAG_"``) names the environment variable it came from, if one is set.
    Never raises.
    """
    loc = tuple(err.get("loc", ()))
    if err.get("type") == "extra_forbidden" and loc:
        where = ".".join(str(p) for p in loc[:-1]) or top
        variable = f"{env_prefix}{'__'.join(str(p) for p in loc)}".upper() if env_prefix else None
        source = next((f" from environment variable {k}" for k in os.environ if k.upper() == variable), "")
        return f"{where}: unknown key {str(loc[-1])!r}{source}{hint(str(loc[-1]), model_at(model, loc[:-1]))}"
    where = ".".join(str(p) for p in loc) or top
    return f"{where}: {err.get('msg', '').removeprefix('Value error, ')}"


def hint(key: str, model: type[BaseModel] | None) -> str:
    """`` (did you mean 'y'?)`` with ``model``'s field name closest to ``key``, else `` (valid keys: …)``;
    empty when the model is not known."""
    if model is None:
        return ""
    fields = list(model.model_fields)
    close = difflib.get_close_matches(key, fields, n=1, cutoff=0.6) or difflib.get_close_matches(
        key.lower(), fields, n=1, cutoff=0.6
    )
    if close:
        return f" (did you mean {close[0]!r}?)"
    listed = ", ".join(fields[:_LISTED]) + (", …" if len(fields) > _LISTED else "")
    return f" (valid keys: {listed})" if fields else " (it takes no keys)"


def model_at(model: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The model reached from ``model`` along ``loc`` (field names, dict keys, list indexes, union tags),
    or ``None`` when the location leaves the models."""
    tp: Any = model
    for part in loc:
        tagged = _member(tp, part)
        if tagged is not None:  # pydantic's tag of the union member it tried
            tp = tagged
            continue
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(str(part))
            if field is None:
                return None
            tp = field.annotation
        elif get_origin(tp) in (dict, Mapping) and len(get_args(tp)) == 2:
            tp = get_args(tp)[1]
        elif get_origin(tp) in (list, tuple, Sequence) and get_args(tp) and isinstance(part, int):
            tp = get_args(tp)[0]
        else:
            return None
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _members(tp: Any) -> list[Any]:
    return (
        [a for a in get_args(tp) if a is not type(None)] if get_origin(tp) in (Union, types.UnionType) else []
    )


def _member(tp: Any, part: int | str) -> Any:
    """The member of union ``tp`` whose name is ``part``, or ``None``."""
    return next((a for a in _members(tp) if getattr(a, "__name__", None) == part), None)


def _unwrap(tp: Any) -> Any:
    """``X`` of ``X | None``; of a wider union its first model, dict or list member."""
    members = _members(tp)
    if not members:
        return tp
    structured = [
        a
        for a in members
        if (isinstance(a, type) and issubclass(a, BaseModel)) or get_origin(a) in (dict, list)
    ]
    return (structured or members)[0]
