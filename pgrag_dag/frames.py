"""Frame schemas and records both the store and the domain read (a leaf): the ``raw_extractions``,
``gate_decisions`` and ``entities`` frames as polars dtypes, and the :class:`Vertex` /
:class:`Resolution` records entity resolution hands the store (paper §4.2, §4.3, §4.6)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pgrag_dag.gate_rules import identity_key

DECISION_SCHEMA: dict[str, Any] = {
    "chunk_id": pl.Int64,
    "pass": pl.Int64,
    "kind": pl.String,
    "name": pl.String,
    "entity_type": pl.String,
    "description": pl.String,
    "aliases": pl.List(pl.String),
    "subject": pl.String,
    "predicate": pl.String,
    "raw_predicate": pl.String,
    "object": pl.String,
    "negated": pl.Boolean,
    "confidence": pl.Float64,
    "valid_from": pl.String,
    "valid_to": pl.String,
    "accepted": pl.Boolean,
    "gate": pl.String,
    "offending_value": pl.String,
}

RAW_SCHEMA: dict[str, Any] = {
    "chunk_id": pl.Int64,
    "pass": pl.Int64,
    "model": pl.String,
    "prompt_version": pl.String,
    "raw_text": pl.String,
    "parsed": pl.String,
    "parse_status": pl.String,
    "error": pl.String,
    "prompt_tokens": pl.Int64,
    "completion_tokens": pl.Int64,
    "cache_hit": pl.Boolean,
}

ENTITY_SCHEMA: dict[str, Any] = {
    "id": pl.Int64,
    "name": pl.String,
    "entity_type": pl.String,
    "description": pl.String,
    "aliases": pl.List(pl.String),
    "changed": pl.Boolean,
}


@dataclass
class Vertex:
    """One entity vertex during resolution: ``id`` is ``None`` until a new vertex is written."""

    id: int | None
    name: str
    entity_type: str
    description: str
    aliases: list[str]
    changed: bool = False
    resolved_type: str | None = None
    """What resolution decided, when an enricher stored another type (else ``None``)."""
    resolved_description: str | None = None
    """What resolution decided, when an enricher stored another description (else ``None``)."""
    merged_into: int | None = None
    """The index (in its :class:`Resolution`) of the vertex this one was merged into, when another vertex
    gained its canonical name as an alias (§4.6, issue 28); a merged vertex is no longer resolved to."""


@dataclass
class Resolution:
    """The resolved vertices and the surface-form lookup (see module docstring)."""

    vertices: list[Vertex] = field(default_factory=list)
    lookup: dict[str, int] = field(default_factory=dict)
    moved: dict[str, int] = field(default_factory=dict)
    """Identity keys whose vertex changed during resolution (a stored vertex gained, as an alias, a form a
    later vertex held, or a form became a canonical name) → the index of the vertex it resolved to before:
    mentions by that form elsewhere resolve anew (issue 15)."""

    def index_of(self, name: str) -> int | None:
        """Index of the vertex a surface form resolves to, or ``None``."""
        return self.lookup.get(identity_key(name))

    def touched(self) -> Resolution:
        """The vertices this resolution created or changed and did not merge away (the same
        :class:`Vertex` objects, so ids a write fills in show in both), without a lookup: what an
        incremental run writes and enriches."""
        return Resolution([v for v in self.vertices if (v.changed or v.id is None) and v.merged_into is None])

    def standing(self) -> Resolution:
        """Every vertex not merged into another (the same objects), without a lookup: what a full run
        writes and enriches."""
        return Resolution([v for v in self.vertices if v.merged_into is None])

    def merges(self) -> list[tuple[Vertex, Vertex]]:
        """(fragment, survivor) for every stored vertex merged into another in this resolution (§4.6);
        a merged vertex that was new is simply never written. The survivor is followed to the end of a
        chain of merges."""
        out = []
        for v in self.vertices:
            if v.merged_into is None or v.id is None:
                continue
            s = self.vertices[v.merged_into]
            while s.merged_into is not None:
                s = self.vertices[s.merged_into]
            out.append((v, s))
        return out

    def entities(self) -> pl.DataFrame:
        """The ``entities`` frame (schema ``ENTITY_SCHEMA``)."""
        rows = [
            {
                "id": v.id,
                "name": v.name,
                "entity_type": v.entity_type,
                "description": v.description,
                "aliases": v.aliases,
                "changed": v.changed,
            }
            for v in self.vertices
        ]
        return pl.DataFrame(rows, schema=ENTITY_SCHEMA)
