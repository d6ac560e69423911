"""Operators: the composable units of the indexing dataflow, their contract, registry and composition.

An :class:`Operator` is a named, typed, pure unit (DESIGN.md "Composition: operators as data"): the
stage slot it fills, an input and an output frame contract (Pandera models of
:mod:`pgrag_dag.contracts`), a pydantic options model, and a function ``fn(frame, options, ctx) →
frame``. Only operators declared ``calls_model`` receive the injected model client in ``ctx``;
nothing else does I/O.

Four slots can be composed per space (``chunker``, ``extractor``, ``gates``, ``enrichers`` in
``pgrag.yaml``); the built-ins are registered by :mod:`pgrag_dag.builtin_operators` under stable
names. A user's operator is named by import path (``package.module:attribute``) or by a Python entry
point in group ``pgrag_dag.operators``; either way it must be an :class:`Operator` (make one with
:func:`operator`). :func:`compose` resolves a space's composition once at settings load, so an
unknown name, a wrong slot or contract, or a bad option is a :class:`ConfigurationError` naming the
space, the stage and the option before anything runs.

Extra gates only add refusals: they see the rows every built-in gate (paper Table 2) accepted, and a
row they refuse is stored with the gate's own name as its reason, like the built-in gates' (§4.3).
Enrichers run after resolution (§4.6) and may change an entity's type, description or aliases — never
its identity (id, canonical name) and never the set of entities.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandera.polars as pa
import polars as pl
from pydantic import BaseModel, ConfigDict, ValidationError

from pgrag_dag import contracts
from pgrag_dag.errors import ConfigurationError, ContractError, OperatorError, PgragError

if TYPE_CHECKING:
    from pgrag_dag.config import GateSettings, OperatorSpec, Settings
    from pgrag_dag.llm import ModelClient
    from pgrag_dag.vocabulary import Vocabulary

ENTRY_POINT_GROUP = "pgrag_dag.operators"

SLOTS: dict[str, tuple[type[pa.DataFrameModel], type[pa.DataFrameModel]]] = {
    "chunker": (contracts.DocumentContract, contracts.ChunkerOutputContract),
    "extractor": (contracts.ExtractorInputContract, contracts.RawExtractionContract),
    "gate": (contracts.GateDecisionContract, contracts.GateVerdictContract),
    "enricher": (contracts.EntityContract, contracts.EntityContract),
}
"""Slot → (input contract, output contract) every operator of that slot must meet (or refine)."""


class NoOptions(BaseModel):
    """Options model of an operator that takes none."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class OperatorContext:
    """What an operator may use beside its frame and options: the partition, the space's vocabulary
    and gate settings, the model client (only for ``calls_model`` operators, else ``None``), and
    ``state`` the stage hands over (e.g. the LLM extractor's document context)."""

    realm: str
    space: str
    vocabulary: Vocabulary
    gates: GateSettings
    client: ModelClient | None = None
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Operator:
    """A named, typed, pure unit of the dataflow (see the module docstring).

    Attributes:
        name: the stable name configurations use (built-ins) or a label (user operators).
        slot: ``chunker`` | ``extractor`` | ``gate`` | ``enricher``.
        fn: ``fn(frame: pl.DataFrame, options: <options model>, ctx: OperatorContext) -> pl.DataFrame``.
        options: pydantic model of the options (``extra="forbid"`` recommended).
        description: shown in the Dagster UI (defaults to ``fn``'s docstring).
        output_contract: the slot's output contract or a subclass of it (stricter checks).
        calls_model: receives ``ctx.client``; its materialisations count model calls.
        version: bump when ``fn``'s behaviour changes, so stored results are recomputed.
        defaults: settings → default options (built-ins read the global ``chunking`` / ``extraction``).
        identity: options → the string stored with an extractor's rows (default: name, version and an
            options hash); rows of another identity are extracted again.
        reparse: for an extractor whose ``raw_text`` is model output: raw text → the ``parsed`` JSON
            text, raising :class:`ValueError` when it does not parse. Every run re-parses the stored
            ``parse_error`` rows with it (no model call), so a fixed parser recovers them.
    """

    name: str
    slot: str
    fn: Callable[..., pl.DataFrame]
    options: type[BaseModel] = NoOptions
    description: str = ""
    output_contract: type[pa.DataFrameModel] | None = None
    calls_model: bool = False
    version: str = "1"
    defaults: Callable[[Settings], dict[str, Any]] | None = None
    identity: Callable[[BaseModel], str] | None = None
    reparse: Callable[[str], str] | None = None

    @property
    def input_contract(self) -> type[pa.DataFrameModel]:
        """The slot's input contract."""
        return SLOTS[self.slot][0]

    @property
    def contract(self) -> type[pa.DataFrameModel]:
        """The output contract its frames are validated against."""
        return self.output_contract or SLOTS[self.slot][1]


def operator(name: str, slot: str, *, options: type[BaseModel] = NoOptions, description: str | None = None,
             output_contract: type[pa.DataFrameModel] | None = None, calls_model: bool = False,
             version: str = "1", reparse: Callable[[str], str] | None = None,
             ) -> Callable[[Callable[..., pl.DataFrame]], Operator]:
    """Decorator making an :class:`Operator` of ``fn(frame, options, ctx)`` (``reparse``: see
    :class:`Operator`).

    Raises :class:`ConfigurationError` for an unknown slot or an output contract that does not
    refine the slot's.
    """
    if slot not in SLOTS:
        raise ConfigurationError(f"operator {name!r}: unknown slot {slot!r} (one of {', '.join(SLOTS)})")
    if output_contract is not None and not issubclass(output_contract, SLOTS[slot][1]):
        raise ConfigurationError(f"operator {name!r}: output contract {output_contract.__name__} does not refine "
                                 f"the {slot} contract {SLOTS[slot][1].__name__}")

    def wrap(fn: Callable[..., pl.DataFrame]) -> Operator:
        text = description if description is not None else " ".join((fn.__doc__ or "").split())
        return Operator(name, slot, fn, options, text, output_contract, calls_model, version, reparse=reparse)

    return wrap


_BUILTINS: dict[str, Operator] = {}


def register(op: Operator) -> Operator:
    """Add a built-in under its stable name; raises :class:`ConfigurationError` on a duplicate name."""
    if op.name in _BUILTINS and _BUILTINS[op.name] is not op:
        raise ConfigurationError(f"operator name {op.name!r} is already registered")
    _BUILTINS[op.name] = op
    return op


def builtins() -> dict[str, Operator]:
    """The built-in operators by name."""
    import pgrag_dag.builtin_operators  # noqa: F401  (registers on import)

    return dict(_BUILTINS)


def resolve_operator(name: str, *, search: Path | None = None) -> Operator:
    """The operator ``name`` denotes: a built-in, an import path ``module:attribute`` (or
    ``module.attribute``), or an entry point of group ``pgrag_dag.operators``. An import path is
    looked up on ``sys.path`` and then in ``search`` (the configuration file's directory), so a
    module beside ``pgrag.yaml`` needs no installing.

    Raises :class:`ConfigurationError` when nothing by that name exists or it is not an :class:`Operator`.
    """
    found = builtins().get(name)
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
            raise ConfigurationError(f"importing operator {name!r} raised {type(exc).__name__}: {exc}") from exc
    else:
        known = ", ".join(sorted(builtins()))
        raise ConfigurationError(f"unknown operator {name!r} (built-ins: {known}; or an import path "
                                 f"module:attribute, or an entry point in group {ENTRY_POINT_GROUP})")
    if not isinstance(target, Operator):
        raise ConfigurationError(f"{name!r} is a {type(target).__name__}, not a pgrag_dag Operator "
                                 "(make one with @pgrag_dag.operators.operator)")
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


@dataclass(frozen=True)
class Bound:
    """An operator with validated options, as one space composes it."""

    op: Operator
    options: BaseModel
    configured_as: str
    """The name the configuration used (a built-in name, an import path or an entry point name)."""

    @property
    def identity(self) -> str:
        """``name@version:<options hash>`` (or the operator's own identity): what changes when its
        output may change."""
        if self.op.identity is not None:
            return self.op.identity(self.options)
        digest = hashlib.sha256(self.options.model_dump_json().encode()).hexdigest()[:12]
        return f"{self.op.name}@{self.op.version}:{digest}"

    def describe(self) -> dict[str, Any]:
        """name, slot, options and description, for stage metadata."""
        return {"operator": self.configured_as, "slot": self.op.slot, "options": json.loads(self.options.model_dump_json()),
                "identity": self.identity}

    def run(self, frame: pl.DataFrame, ctx: OperatorContext) -> pl.DataFrame:
        """Validate ``frame`` against the input contract, call the operator, validate its output.

        Raises :class:`ContractError` (contract named ``<output contract> (operator <name>)``) when
        the output breaks the contract, lacks a column or is no polars frame; :class:`OperatorError`
        when the operator raises (a :class:`PgragError` it raises passes through).
        """
        contracts.validate(self.op.input_contract, frame)
        try:  # a clone (polars shares the buffers): an operator changing its input in place changes nothing
            out = self.op.fn(frame.clone(), self.options, ctx)
        except PgragError:
            raise
        except Exception as exc:  # a user's bug: name it, never a bare traceback from deep inside a stage
            raise OperatorError(self.op.name, f"{self.op.slot} of space {ctx.realm}.{ctx.space}", exc) from exc
        label = f"{self.op.contract.__name__} (operator {self.op.name})"
        if not isinstance(out, pl.DataFrame):
            raise ContractError(label, f"operator returned {type(out).__name__}, not a polars DataFrame")
        missing = [c for c in self.op.contract.to_schema().columns if c not in out.columns]
        if missing:
            raise ContractError(label, f"the operator's frame lacks column(s) {missing}")
        try:
            return contracts.validate(self.op.contract, out)
        except ContractError as exc:
            raise ContractError(label, str(exc).split(": ", 1)[-1], exc.failure_cases) from None


DEFAULTS = {"chunker": "paragraph_pack", "extractor": "llm"}


@dataclass(frozen=True)
class Composition:
    """A space's resolved composition: chunker, extractor, extra gates (in order), enrichers (in order)."""

    chunker: Bound
    extractor: Bound
    gates: tuple[Bound, ...]
    enrichers: tuple[Bound, ...]

    def describe(self) -> dict[str, Any]:
        """Every slot's operators, for stage metadata and the UI."""
        return {"chunker": self.chunker.describe(), "extractor": self.extractor.describe(),
                "gates": [g.describe() for g in self.gates], "enrichers": [e.describe() for e in self.enrichers]}

    def user_operators(self) -> list[Bound]:
        """The bound operators that are not built-ins."""
        return compose_user([self.chunker, self.extractor, *self.gates, *self.enrichers])


def compose_user(bounds: Sequence[Bound]) -> list[Bound]:
    """Those of ``bounds`` whose operator is not a built-in (a user's, by import path or entry point)."""
    known = builtins()
    return [b for b in bounds if known.get(b.op.name) is not b.op]


def operator_check_name(name: str) -> str:
    """The Dagster asset-check name of a user operator: ``operator_<name>``; a name with characters
    outside ``[A-Za-z0-9_]`` has them replaced by ``_`` and gains 8 hex digits of its SHA-256, so two
    names never share a check (``house-rules`` and ``house_rules``, ``名前`` and ``氏名``)."""
    clean = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return "operator_" + (clean if clean == name else f"{clean}_{hashlib.sha256(name.encode()).hexdigest()[:8]}")


def _bind(settings: Settings, where: str, slot: str, spec: OperatorSpec) -> Bound:
    """Resolve ``spec`` for ``slot`` and validate its options (defaults first, then the configured ones)."""
    try:
        op = resolve_operator(spec.name, search=settings.config_dir)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}, stage {slot}: {exc}") from None
    if op.slot != slot:
        raise ConfigurationError(f"{where}, stage {slot}: operator {spec.name!r} is a {op.slot}, "
                                 f"its contract is {op.input_contract.__name__} → {op.contract.__name__}, "
                                 f"not {SLOTS[slot][0].__name__} → {SLOTS[slot][1].__name__}")
    if not issubclass(op.contract, SLOTS[slot][1]):
        raise ConfigurationError(f"{where}, stage {slot}: operator {spec.name!r} declares output contract "
                                 f"{op.contract.__name__}, which does not refine {SLOTS[slot][1].__name__}")
    base = op.defaults(settings) if op.defaults else {}
    try:
        options = op.options.model_validate({**base, **spec.options})
    except ValidationError as exc:
        from pgrag_dag.config_errors import describe

        problems = "; ".join(describe(e, op.options, top="options") if e["type"] == "extra_forbidden"  # names the nearest
                             else f"option {'.'.join(str(p) for p in e['loc']) or '(options)'}: "
                             f"{e['msg'].removeprefix('Value error, ')}" for e in exc.errors())
        raise ConfigurationError(f"{where}, stage {slot}, operator {spec.name!r}: {problems}") from None
    return Bound(op, options, spec.name)


def compose(settings: Settings, realm: str, space: str) -> Composition:
    """Resolve one space's composition (defaults: today's pipeline, no extra gates or enrichers).

    Raises :class:`ConfigurationError` naming the space, the stage and the option for an unknown
    operator, an operator of another slot or contract, a bad option, or an extra gate whose name is
    a built-in gate's (a reason must name one gate).
    """
    from pgrag_dag.config import OperatorSpec
    from pgrag_dag.gates import Gate

    spec = settings.space_spec(realm, space)
    where = f"space {realm}.{space}"
    chunker = _bind(settings, where, "chunker", spec.chunker or OperatorSpec(name=DEFAULTS["chunker"]))
    extractor = _bind(settings, where, "extractor", spec.extractor or OperatorSpec(name=DEFAULTS["extractor"]))
    gates = tuple(_bind(settings, where, "gate", g) for g in spec.gates)
    reserved = {g.value for g in Gate}
    for g in gates:
        if g.op.name in reserved:
            raise ConfigurationError(f"{where}, stage gate: operator {g.configured_as!r} is named {g.op.name!r}, "
                                     "the reason of a built-in gate; give it its own name")
    names = [g.op.name for g in gates]
    if len(set(names)) != len(names):
        raise ConfigurationError(f"{where}, stage gate: two extra gates share a name ({names}); reasons must differ")
    enrichers = tuple(_bind(settings, where, "enricher", e) for e in spec.enrichers)
    return Composition(chunker, extractor, gates, enrichers)


def compose_all(settings: Settings) -> dict[str, Composition]:
    """Every declared space's composition by partition key (``realm.space``); raises as :func:`compose`,
    and when two different operators of one slot share a name across spaces."""
    from pgrag_dag.names import partition_key

    comps = {partition_key(r, s): compose(settings, r, s) for r, spec in settings.realms.items() for s in spec.spaces}
    seen: dict[tuple[str, str], tuple[Operator, str]] = {}  # (slot, name) -> first operator, where
    for key, comp in comps.items():
        for b in comp.user_operators():
            first = seen.setdefault((b.op.slot, b.op.name), (b.op, f"{key} ({b.configured_as})"))
            if first[0] is not b.op:
                raise ConfigurationError(
                    f"space {key}, stage {b.op.slot}: operator {b.configured_as!r} is named {b.op.name!r}, like another "
                    f"operator in {first[1]}; a {b.op.slot}'s name must denote one operator (its check and reason)")
    return comps
