"""Operators: the composable units of the indexing dataflow and the slot contracts they meet.

An :class:`Operator` is a named, typed, pure unit (``../shared/DESIGN.md`` "Composition: operators
as data"): the
stage slot it fills, an input and an output frame contract (Pandera models of
:mod:`pgrag_dag.operators.contracts`), a pydantic options model, and a function ``fn(frame, options, ctx) →
frame``. Only operators declared ``calls_model`` receive the injected model client in ``ctx``;
nothing else does I/O.

Four slots can be composed per space (``chunker``, ``extractor``, ``gates``, ``enrichers`` in
``pgrag.yaml``); the built-ins are a static table, :mod:`pgrag_dag.pipeline.builtin_operators`, under
stable names. A user's operator is named by import path (``package.module:attribute``) or by a Python entry
point in group ``pgrag_dag.operators``; either way it must be an :class:`Operator` (make one with
:func:`operator`). :func:`pgrag_dag.pipeline.composition.compose` resolves a space's composition once at
settings load, so an unknown name, a wrong slot or contract, or a bad option is a :class:`ConfigurationError`
naming the space, the stage and the option before anything runs.

Extra gates only add refusals: they see the rows every built-in gate (paper Table 2) accepted, and a
row they refuse is stored with the gate's own name as its reason, like the built-in gates' (§4.3).
Enrichers run after resolution (§4.6) and may change an entity's type, description or aliases — never
its identity (id, canonical name) and never the set of entities.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandera.polars as pa
import polars as pl
from pydantic import BaseModel, ConfigDict

from pgrag_dag.errors import ConfigurationError, ContractError, OperatorError, PgragError
from pgrag_dag.operators import contracts

if TYPE_CHECKING:
    from pgrag_dag.config.sections import GateSettings, Settings
    from pgrag_dag.providers.llm import ModelClient
    from pgrag_dag.vocabulary import Vocabulary

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


def operator(
    name: str,
    slot: str,
    *,
    options: type[BaseModel] = NoOptions,
    description: str | None = None,
    output_contract: type[pa.DataFrameModel] | None = None,
    calls_model: bool = False,
    version: str = "1",
    reparse: Callable[[str], str] | None = None,
) -> Callable[[Callable[..., pl.DataFrame]], Operator]:
    """Decorator making an :class:`Operator` of ``fn(frame, options, ctx)`` (``reparse``: see
    :class:`Operator`).

    Raises :class:`ConfigurationError` for an unknown slot or an output contract that does not
    refine the slot's.
    """
    if slot not in SLOTS:
        raise ConfigurationError(f"operator {name!r}: unknown slot {slot!r} (one of {', '.join(SLOTS)})")
    if output_contract is not None and not issubclass(output_contract, SLOTS[slot][1]):
        raise ConfigurationError(
            f"operator {name!r}: output contract {output_contract.__name__} does not refine "
            f"the {slot} contract {SLOTS[slot][1].__name__}"
        )

    def wrap(fn: Callable[..., pl.DataFrame]) -> Operator:
        text = description if description is not None else " ".join((fn.__doc__ or "").split())
        return Operator(name, slot, fn, options, text, output_contract, calls_model, version, reparse=reparse)

    return wrap


@dataclass(frozen=True)
class BoundOperator:
    """An operator with validated options, as one space composes it."""

    op: Operator
    options: BaseModel
    configured_as: str
    """The name the configuration used (a built-in name, an import path or an entry point name)."""
    builtin: bool = False
    """Whether ``op`` is the built-in of that name (set by :func:`pgrag_dag.pipeline.composition.compose`)."""

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
        return {
            "operator": self.configured_as,
            "slot": self.op.slot,
            "options": json.loads(self.options.model_dump_json()),
            "identity": self.identity,
        }

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
            raise OperatorError(
                self.op.name, f"{self.op.slot} of space {ctx.realm}.{ctx.space}", exc
            ) from exc
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


@dataclass(frozen=True)
class Composition:
    """A space's resolved composition: chunker, extractor, extra gates (in order), enrichers (in order)."""

    chunker: BoundOperator
    extractor: BoundOperator
    gates: tuple[BoundOperator, ...]
    enrichers: tuple[BoundOperator, ...]

    def describe(self) -> dict[str, Any]:
        """Every slot's operators, for stage metadata and the UI."""
        return {
            "chunker": self.chunker.describe(),
            "extractor": self.extractor.describe(),
            "gates": [g.describe() for g in self.gates],
            "enrichers": [e.describe() for e in self.enrichers],
        }

    def user_operators(self) -> list[BoundOperator]:
        """The bound operators that are not built-ins."""
        return compose_user([self.chunker, self.extractor, *self.gates, *self.enrichers])


def compose_user(bounds: Sequence[BoundOperator]) -> list[BoundOperator]:
    """Those of ``bounds`` whose operator is not a built-in (a user's, by import path or entry point)."""
    return [b for b in bounds if not b.builtin]


def operator_check_name(name: str) -> str:
    """The Dagster asset-check name of a user operator: ``operator_<name>``; a name with characters
    outside ``[A-Za-z0-9_]`` has them replaced by ``_`` and gains 8 hex digits of its SHA-256, so two
    names never share a check (``house-rules`` and ``house_rules``, ``名前`` and ``氏名``)."""
    clean = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return "operator_" + (
        clean if clean == name else f"{clean}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    )
