"""Stage contracts: one Pandera ``DataFrameModel`` per stage frame (`../shared/DESIGN.md`, paper Table 2).

The operators' tests validate against these, and the Dagster assets run the same models as blocking
asset checks, so a gate that leaks fails the materialisation visibly.

Use :func:`validate` to get a :class:`~pgrag_dag.errors.ContractError` carrying the failure cases
(a polars frame: failure_case, schema_context, column, check, check_number, index).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, ClassVar

import pandera.polars as pa
import polars as pl
from pandera.api.polars.types import PolarsData

from pgrag_dag.config.sections import GateSettings
from pgrag_dag.errors import ContractError
from pgrag_dag.gate_rules import VAGUE_PREDICATES, identity_key, name_gate


def _rows(data: PolarsData) -> pl.DataFrame:
    return data.lazyframe.collect()


class DocumentContract(pa.DataFrameModel):
    """``documents`` (what a chunker reads, one row per document): unique non-empty doc_key, text, title,
    source, doc_order, doc_hash, metadata (JSON text)."""

    doc_key: str = pa.Field(str_length={"min_value": 1}, unique=True)
    text: str
    title: str
    source: str
    doc_order: int


class ChunkerOutputContract(pa.DataFrameModel):
    """What a chunker returns: doc_key, chunk_index (0-based, contiguous per document), non-empty text,
    metadata (a JSON object as text, or null). The stage adds title, source, order and hashes."""

    doc_key: str = pa.Field(str_length={"min_value": 1})
    chunk_index: int = pa.Field(ge=0)
    text: str = pa.Field(str_length={"min_value": 1})
    metadata: str = pa.Field(nullable=True)

    class Config:
        unique = ["doc_key", "chunk_index"]

    @pa.dataframe_check
    @classmethod
    def text_not_blank(cls, data: PolarsData) -> pl.LazyFrame:
        """A chunk has at least one non-whitespace character."""
        return data.lazyframe.select(pl.col("text").str.strip_chars().str.len_chars() > 0)

    @pa.dataframe_check
    @classmethod
    def indexes_contiguous(cls, data: PolarsData) -> pl.LazyFrame:
        """Each document's chunk indexes are 0, 1, ..., n-1."""
        return data.lazyframe.select(
            (pl.col("chunk_index").rank("ordinal").over("doc_key") - 1).cast(pl.Int64)
            == pl.col("chunk_index")
        )

    @pa.dataframe_check
    @classmethod
    def metadata_is_json_object(cls, data: PolarsData) -> pl.LazyFrame:
        """metadata, when set, parses as a JSON object."""
        return data.lazyframe.select(
            pl.col("metadata").map_elements(_is_json_object, return_dtype=pl.Boolean, skip_nulls=False)
        )


def _is_json_object(text: str | None) -> bool:
    if text is None:
        return True
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _is_extraction(text: str | None) -> bool:
    if text is None:
        return True
    try:
        obj = json.loads(text)
    except ValueError:
        return False
    if not isinstance(obj, dict) or not ({"entities", "triples"} & set(obj)):
        return False
    return all(
        isinstance(obj.get(k, []), list) and all(isinstance(i, dict) for i in obj.get(k, []))
        for k in ("entities", "triples")
    )


class ExtractorInputContract(pa.DataFrameModel):
    """What an extractor reads (stored chunks, document order): chunk_id, doc_key, chunk_index, title,
    source, non-empty text."""

    chunk_id: int = pa.Field(unique=True)
    doc_key: str
    chunk_index: int = pa.Field(ge=0)
    title: str
    source: str
    text: str = pa.Field(str_length={"min_value": 1})


class GateVerdictContract(pa.DataFrameModel):
    """What an extra gate returns: one row per input row (the rows every built-in gate accepted, same
    order) with ``refused`` (bool) and optionally ``offending_value`` (the refused value, nullable)."""

    refused: bool


class ChunkContract(pa.DataFrameModel):
    """``chunks``: unique (doc_key, chunk_index); non-empty text; content_hash = SHA-256(text)."""

    chunk_id: int = pa.Field(nullable=True)
    doc_key: str = pa.Field(str_length={"min_value": 1})
    chunk_index: int = pa.Field(ge=0)
    text: str = pa.Field(str_length={"min_value": 1})
    content_hash: str = pa.Field(str_length={"min_value": 64, "max_value": 64})

    class Config:
        unique = ["doc_key", "chunk_index"]

    @pa.dataframe_check
    @classmethod
    def hash_matches_text(cls, data: PolarsData) -> pl.LazyFrame:
        """content_hash is the SHA-256 of the chunk's text."""
        return data.lazyframe.select(
            pl.struct("text", "content_hash").map_elements(
                lambda r: hashlib.sha256(r["text"].encode()).hexdigest() == r["content_hash"],
                return_dtype=pl.Boolean,
            )
        )


class RawExtractionContract(pa.DataFrameModel):
    """``raw_extractions``: one row per (chunk, pass); explicit parse status; parsed JSON iff ok."""

    chunk_id: int
    pass_: int = pa.Field(alias="pass", ge=0)
    parse_status: str = pa.Field(isin=["ok", "parse_error", "model_error"])
    parsed: str = pa.Field(nullable=True)

    class Config:
        unique = ["chunk_id", "pass"]

    @pa.dataframe_check
    @classmethod
    def parsed_iff_ok(cls, data: PolarsData) -> pl.LazyFrame:
        """A row has parsed JSON exactly when its status is ``ok``."""
        return data.lazyframe.select((pl.col("parse_status") == "ok") == pl.col("parsed").is_not_null())

    @pa.dataframe_check
    @classmethod
    def parsed_is_an_extraction(cls, data: PolarsData) -> pl.LazyFrame:
        """parsed, when set, is a JSON object with ``entities`` and/or ``triples``, each a list of objects."""
        return data.lazyframe.select(
            pl.col("parsed").map_elements(_is_extraction, return_dtype=pl.Boolean, skip_nulls=False)
        )


class GateDecisionContract(pa.DataFrameModel):
    """``gate_decisions``: no accepted row violates a gate of Table 2; each rejection names its gate.

    Checked with the space's gate settings (:func:`gate_contract`), except that a name is never longer
    than the paper's 200 characters whatever the settings say (the unique btree index's limit).
    """

    chunk_id: int
    kind: str = pa.Field(isin=["entity", "triple"])
    accepted: bool
    gate: str = pa.Field(nullable=True)

    _gate_settings: ClassVar[GateSettings] = GateSettings()

    @classmethod
    def _settings(cls) -> GateSettings:
        s = cls._gate_settings
        return s.model_copy(update={"max_name_chars": min(s.max_name_chars, 200)})

    @pa.dataframe_check
    @classmethod
    def rejection_names_gate(cls, data: PolarsData) -> pl.LazyFrame:
        """Accepted rows carry no gate; rejected rows carry one."""
        return data.lazyframe.select(pl.col("accepted") == pl.col("gate").is_null())

    @pa.dataframe_check
    @classmethod
    def accepted_entities_pass_name_gates(cls, data: PolarsData) -> pl.LazyFrame:
        """No accepted entity has a pronominal, conjunctive, quantity, possessive (if on) or over-long
        name."""
        settings = cls._settings()
        return data.lazyframe.select(
            pl.struct("kind", "accepted", "name", "entity_type").map_elements(
                lambda r: (
                    not (r["kind"] == "entity" and r["accepted"])
                    or name_gate(r["name"] or "", settings, entity_type=r["entity_type"]) is None
                ),
                return_dtype=pl.Boolean,
            )
        )

    @pa.dataframe_check
    @classmethod
    def accepted_triples_pass_triple_gates(cls, data: PolarsData) -> pl.LazyFrame:
        """No accepted triple has a vague predicate, a self-loop or a sub-floor confidence (its endpoints'
        names are checked as accepted entities, see ``accepted_triples_have_accepted_endpoints``)."""
        settings = cls._settings()

        def ok(r: dict[str, Any]) -> bool:
            if not (r["kind"] == "triple" and r["accepted"]):
                return True
            s, o = r["subject"] or "", r["object"] or ""
            return (
                bool(r["predicate"])
                and r["predicate"] not in VAGUE_PREDICATES
                and identity_key(s) != identity_key(o)
                and r["confidence"] is not None
                and r["confidence"] >= settings.confidence_floor
            )

        return data.lazyframe.select(
            pl.struct("kind", "accepted", "subject", "predicate", "object", "confidence").map_elements(
                ok, return_dtype=pl.Boolean
            )
        )

    @pa.dataframe_check
    @classmethod
    def accepted_triples_have_accepted_endpoints(cls, data: PolarsData) -> pl.LazyFrame:
        """Every accepted triple's endpoints are accepted entities of the same chunk and pass (no orphan)."""
        frame = data.lazyframe
        ents = (
            frame.filter((pl.col("kind") == "entity") & pl.col("accepted"))
            .select("chunk_id", "pass", key=pl.col("name").map_elements(identity_key, return_dtype=pl.String))
            .unique()
        )
        keyed = frame.with_row_index("_row").with_columns(
            _s=pl.col("subject").map_elements(identity_key, return_dtype=pl.String),
            _o=pl.col("object").map_elements(identity_key, return_dtype=pl.String),
        )
        found = (
            keyed.join(
                ents.rename({"key": "_s"}).with_columns(_sk=pl.lit(True)),
                on=["chunk_id", "pass", "_s"],
                how="left",
            )
            .join(
                ents.rename({"key": "_o"}).with_columns(_ok=pl.lit(True)),
                on=["chunk_id", "pass", "_o"],
                how="left",
            )
            .sort("_row")
        )
        return found.select(
            ~((pl.col("kind") == "triple") & pl.col("accepted"))
            | (pl.col("_sk").is_not_null() & pl.col("_ok").is_not_null())
        )


def gate_contract(settings: GateSettings) -> type[GateDecisionContract]:
    """:class:`GateDecisionContract` checking against ``settings`` (confidence floor, possessive gate)."""
    return type("GateDecisionContract", (GateDecisionContract,), {"_gate_settings": settings})


class EntityContract(pa.DataFrameModel):
    """``entities``: one entity per lower(name); no alias equal to its canonical name."""

    id: int
    name: str = pa.Field(str_length={"min_value": 1, "max_value": 200})

    @pa.dataframe_check
    @classmethod
    def one_entity_per_lower_name(cls, data: PolarsData) -> pl.LazyFrame:
        """lower(name) is unique."""
        return data.lazyframe.select(~pl.col("name").str.to_lowercase().is_duplicated())

    @pa.dataframe_check
    @classmethod
    def no_alias_equals_canonical(cls, data: PolarsData) -> pl.LazyFrame:
        """No alias has the canonical name's identity."""
        return data.lazyframe.select(
            pl.struct("name", "aliases").map_elements(
                lambda r: identity_key(r["name"]) not in {identity_key(a) for a in r["aliases"] or []},
                return_dtype=pl.Boolean,
            )
        )


class RelationContract(pa.DataFrameModel):
    """``relations``: weight = distinct contributing chunks; no self-loop; one edge per (s, p, o, negated)."""

    source_id: int
    target_id: int
    predicate: str = pa.Field(str_length={"min_value": 1})
    negated: bool
    weight: int = pa.Field(ge=1)

    class Config:
        unique = ["source_id", "predicate", "target_id", "negated"]

    @pa.dataframe_check
    @classmethod
    def weight_is_distinct_chunks(cls, data: PolarsData) -> pl.LazyFrame:
        """weight equals the number of distinct chunk_ids."""
        return data.lazyframe.select(pl.col("weight") == pl.col("chunk_ids").list.unique().list.len())

    @pa.dataframe_check
    @classmethod
    def no_self_loop(cls, data: PolarsData) -> pl.LazyFrame:
        """source and target differ."""
        return data.lazyframe.select(pl.col("source_id") != pl.col("target_id"))


class SupersessionContract(pa.DataFrameModel):
    """``supersession`` audit frame: every superseded edge is superseded by a *later* assertion; by a
    group or a negation flip only on the same ordered pair, by a group only within one group, and by a
    single-valued predicate only by the same predicate on the same single-valued end (issue 27)."""

    row: int
    superseded_by_row: int
    reason: str = pa.Field(isin=["group", "single_valued", "negation", "contradiction"])
    later: bool = pa.Field(isin=[True])
    same_pair: bool
    same_group: bool
    same_single_end: bool

    class Config:
        unique = ["row"]

    @pa.dataframe_check
    @classmethod
    def declared_reasons_hold(cls, data: PolarsData) -> pl.LazyFrame:
        """group → same pair and same group; negation → same pair; single_valued → same single end."""
        return data.lazyframe.select(
            ((pl.col("reason") != "group") | (pl.col("same_pair") & pl.col("same_group")))
            & ((pl.col("reason") != "negation") | pl.col("same_pair"))
            & ((pl.col("reason") != "single_valued") | pl.col("same_single_end"))
        )


class EmbeddingContract(pa.DataFrameModel):
    """``embeddings`` audit frame (one row per embedded row): table, row_id, dim, finite, norm.

    Every vector has the realm's width (checked against ``expected_dim`` by the caller's frame) and
    no NaN or infinity.
    """

    table: str = pa.Field(isin=["documents", "entities", "relations", "communities"])
    row_id: int
    dim: int
    expected_dim: int
    finite: bool = pa.Field(isin=[True])

    @pa.dataframe_check
    @classmethod
    def width_is_realm_width(cls, data: PolarsData) -> pl.LazyFrame:
        """dim equals the realm's configured width."""
        return data.lazyframe.select(pl.col("dim") == pl.col("expected_dim"))


class CommunityMemberContract(pa.DataFrameModel):
    """``communities`` (members frame): community_id, entity_id, entity_exists, size ≥ min_size."""

    community_id: int
    entity_id: int
    entity_exists: bool = pa.Field(isin=[True])
    size: int
    min_size: int

    class Config:
        unique = ["community_id", "entity_id"]

    @pa.dataframe_check
    @classmethod
    def size_at_least_min(cls, data: PolarsData) -> pl.LazyFrame:
        """Every community has at least ``min_size`` members."""
        return data.lazyframe.select(pl.col("size") >= pl.col("min_size"))


class HierarchyContract(pa.DataFrameModel):
    """``community_hierarchy`` (children frame): every child community in exactly one parent."""

    parent_id: int
    child_id: int

    class Config:
        unique = ["child_id"]


def validate(model: type[pa.DataFrameModel], frame: pl.DataFrame) -> pl.DataFrame:
    """Validate ``frame`` eagerly against ``model`` (all checks, data included).

    Raises :class:`ContractError` with ``failure_cases`` (a polars frame) on any failure.
    """
    import pandera.errors

    try:
        return model.validate(frame, lazy=True)
    except pandera.errors.SchemaErrors as err:
        cases = err.failure_cases
        which = sorted({f"{c or 'frame'}: {k}" for c, k in cases.select("column", "check").iter_rows()})
        more = f" and {len(which) - 4} more" if len(which) > 4 else ""
        raise ContractError(
            model.__name__, f"{cases.height} failure case(s) — {'; '.join(which[:4])}{more}", cases
        ) from None
