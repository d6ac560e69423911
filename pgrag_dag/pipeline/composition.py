"""Composition: which operator fills each slot of a space, resolved once at settings load (paper §3.2).

A space's ``chunker``, ``extractor``, ``gates`` and ``enrichers`` in ``pgrag.yaml`` name built-ins
(:data:`~pgrag_dag.pipeline.builtin_operators.BUILTINS`, a static table), import paths
(``package.module:attribute``) or entry points of group ``pgrag_dag.operators``. :func:`compose`
binds each to its validated options, so an unknown name, a wrong slot or contract, or a bad option
is a :class:`ConfigurationError` naming the space, the stage and the option before anything runs.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pgrag_dag.config.sections import OperatorSpec, Settings
from pgrag_dag.config.suggestions import describe
from pgrag_dag.errors import ConfigurationError
from pgrag_dag.gate_rules import Gate
from pgrag_dag.names import partition_key
from pgrag_dag.operators.core import SLOTS, BoundOperator, Composition, Operator
from pgrag_dag.pipeline.builtin_operators import BUILTINS

ENTRY_POINT_GROUP = "pgrag_dag.operators"
"""The entry-point group a package declares its operators in."""

DEFAULTS = {"chunker": "paragraph_pack", "extractor": "llm"}
"""The operator a space gets when it names none for a slot."""


def builtins() -> dict[str, Operator]:
    """The built-in operators by name (a copy of the static table)."""
    return dict(BUILTINS)


def resolve_operator(name: str, *, search: Path | None = None) -> Operator:
    """The operator ``name`` denotes: a built-in, an import path ``module:attribute`` (or
    ``module.attribute``), or an entry point of group ``pgrag_dag.operators``. An import path is
    looked up on ``sys.path`` and then in ``search`` (the configuration file's directory), so a
    module beside ``pgrag.yaml`` needs no installing.

    Raises :class:`ConfigurationError` when nothing by that name exists or it is not an :class:`Operator`.
    """
    found = BUILTINS.get(name)
    if found is not None:
        return found
    target: Any = None
    eps = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if eps:
        try:
            target = eps[0].load()
        except Exception as exc:
            raise ConfigurationError(f"entry point {name!r} ({eps[0].value}) failed to load: {exc}") from exc
    elif ":" in name or "." in name:
        module, _, attr = name.partition(":") if ":" in name else name.rpartition(".")
        try:
            target = getattr(_import(module, search), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(f"cannot import operator {name!r}: {exc}") from exc
        except Exception as exc:  # the module itself fails on import
            raise ConfigurationError(
                f"importing operator {name!r} raised {type(exc).__name__}: {exc}"
            ) from exc
    else:
        known = ", ".join(sorted(BUILTINS))
        raise ConfigurationError(
            f"unknown operator {name!r} (built-ins: {known}; or an import path "
            f"module:attribute, or an entry point in group {ENTRY_POINT_GROUP})"
        )
    if not isinstance(target, Operator):
        raise ConfigurationError(
            f"{name!r} is a {type(target).__name__}, not a pgrag_dag Operator "
            "(make one with @pgrag_dag.operators.operator)"
        )
    return target


def _import(module: str, search: Path | None) -> Any:
    """``import module``, trying ``search`` after ``sys.path`` (the directory stays on the path, so
    the module's own imports of its neighbours work in every process that loads the settings)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if search is None or exc.name != module.split(".")[0] or str(search) in sys.path:
            raise
    sys.path.append(str(search))
    importlib.invalidate_caches()
    return importlib.import_module(module)


def _bind(settings: Settings, where: str, slot: str, spec: OperatorSpec) -> BoundOperator:
    """Resolve ``spec`` for ``slot`` and validate its options (defaults first, then the configured ones)."""
    try:
        op = resolve_operator(spec.name, search=settings.config_dir)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}, stage {slot}: {exc}") from None
    if op.slot != slot:
        raise ConfigurationError(
            f"{where}, stage {slot}: operator {spec.name!r} is a {op.slot}, "
            f"its contract is {op.input_contract.__name__} → {op.contract.__name__}, "
            f"not {SLOTS[slot][0].__name__} → {SLOTS[slot][1].__name__}"
        )
    if not issubclass(op.contract, SLOTS[slot][1]):
        raise ConfigurationError(
            f"{where}, stage {slot}: operator {spec.name!r} declares output contract "
            f"{op.contract.__name__}, which does not refine {SLOTS[slot][1].__name__}"
        )
    base = op.defaults(settings) if op.defaults else {}
    try:
        options = op.options.model_validate({**base, **spec.options})
    except ValidationError as exc:
        problems = "; ".join(
            describe(e, op.options, top="options")
            if e["type"] == "extra_forbidden"  # names the nearest
            else f"option {'.'.join(str(p) for p in e['loc']) or '(options)'}: "
            f"{e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise ConfigurationError(f"{where}, stage {slot}, operator {spec.name!r}: {problems}") from None
    return BoundOperator(op, options, spec.name, builtin=BUILTINS.get(op.name) is op)


def compose(settings: Settings, realm: str, space: str) -> Composition:
    """Resolve one space's composition (defaults: today's pipeline, no extra gates or enrichers).

    Raises :class:`ConfigurationError` naming the space, the stage and the option for an unknown
    operator, an operator of another slot or contract, a bad option, or an extra gate whose name is
    a built-in gate's (a reason must name one gate).
    """
    spec = settings.space_spec(realm, space)
    where = f"space {realm}.{space}"
    chunker = _bind(settings, where, "chunker", spec.chunker or OperatorSpec(name=DEFAULTS["chunker"]))
    extractor = _bind(
        settings, where, "extractor", spec.extractor or OperatorSpec(name=DEFAULTS["extractor"])
    )
    gates = tuple(_bind(settings, where, "gate", g) for g in spec.gates)
    reserved = {g.value for g in Gate}
    for g in gates:
        if g.op.name in reserved:
            raise ConfigurationError(
                f"{where}, stage gate: operator {g.configured_as!r} is named {g.op.name!r}, "
                "the reason of a built-in gate; give it its own name"
            )
    names = [g.op.name for g in gates]
    if len(set(names)) != len(names):
        raise ConfigurationError(
            f"{where}, stage gate: two extra gates share a name ({names}); reasons must differ"
        )
    enrichers = tuple(_bind(settings, where, "enricher", e) for e in spec.enrichers)
    return Composition(chunker, extractor, gates, enrichers)


def compose_all(settings: Settings) -> dict[str, Composition]:
    """Every declared space's composition by partition key (``realm.space``); raises as :func:`compose`,
    and when two different operators of one slot share a name across spaces."""
    comps = {
        partition_key(r, s): compose(settings, r, s)
        for r, spec in settings.realms.items()
        for s in spec.spaces
    }
    seen: dict[tuple[str, str], tuple[Operator, str]] = {}  # (slot, name) -> first operator, where
    for key, comp in comps.items():
        for b in comp.user_operators():
            first = seen.setdefault((b.op.slot, b.op.name), (b.op, f"{key} ({b.configured_as})"))
            if first[0] is not b.op:
                raise ConfigurationError(
                    f"space {key}, stage {b.op.slot}: operator {b.configured_as!r} is named {b.op.name!r}, "
                    f"like another operator in {first[1]}; "
                    f"a {b.op.slot}'s name must denote one operator (its check and reason)"
                )
    return comps
