"""Entity resolution: one vertex per (realm, space, lower(name)), then by alias (paper §4.6).

Pure operator over frames; the store applies its result under a per-partition advisory lock so that
concurrent writers converge on one vertex.

Input ``existing`` (the space's stored entities): id (Int64), name, entity_type, description,
aliases (list[str]). Input ``decisions``: the accepted entity rows of ``gate_decisions`` in
(chunk_id, pass) order — chunk_id, name, entity_type, description, aliases.

Output :class:`Resolution`: ``entities`` (id or null for new vertices, name, entity_type,
description, aliases, changed: bool) and ``lookup`` (identity key of every surface form → index into
``entities``), used to resolve triple endpoints and mentions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from pgrag_dag.frames import Resolution, Vertex
from pgrag_dag.gate_rules import identity_key

if TYPE_CHECKING:
    from pgrag_dag.operators.core import BoundOperator, OperatorContext

GENERIC_TYPE = "Concept"


def merge_into(v: Vertex, name: str, entity_type: str, description: str, aliases: list[str]) -> None:
    """Merge one record into a vertex under §4.6's policy (a specific value never loses to a bare stub).

    The longer surface form becomes canonical and the shorter an alias; of two spellings of one name (the
    same identity key) a mixed-case one replaces one in capitals ("Amy Hood" for a transcript's speaker
    label "AMY HOOD"); a bare ``Concept`` type never overwrites a specific one; a longer description wins;
    alias sets are unioned minus the canonical name.
    """
    before = (v.name, v.entity_type, v.description, list(v.aliases))
    forms = [v.name, name, *v.aliases, *aliases]
    if len(name) > len(v.name) or (
        v.name.isupper() and not name.isupper() and identity_key(name) == identity_key(v.name)
    ):
        v.name = name
    if entity_type and entity_type != GENERIC_TYPE and (v.entity_type == GENERIC_TYPE or not v.entity_type):
        v.entity_type = entity_type
    if len(description or "") > len(v.description or ""):
        v.description = description
    seen = {identity_key(v.name)}
    merged: list[str] = []
    for form in forms:
        key = identity_key(form)
        if form and key not in seen:
            seen.add(key)
            merged.append(form)
    v.aliases = merged
    if (v.name, v.entity_type, v.description, v.aliases) != before:
        v.changed = True


def merge_race_loser(winner: Vertex, loser: Vertex) -> None:
    """Merge a new vertex that lost the unique-name race to another writer into the winner's stored
    vertex (§4.6), by :func:`merge_into`'s policy; what :func:`pgrag_dag.store.graph.write_entities`
    is handed, so the merge rule stays here and the store only writes its result."""
    merge_into(winner, loser.name, loser.entity_type, loser.description, loser.aliases)


def resolve_entities(
    existing: pl.DataFrame, decisions: pl.DataFrame | Iterable[Mapping[str, Any]]
) -> Resolution:
    """Resolve accepted entity records (a frame, or its rows as mappings streamed in order: a full run
    never holds the space's records at once, issue 30) onto stored and new vertices, in record order.

    Lookup order for each record: its name against canonical names, then its name against aliases,
    then its aliases against canonical names (never alias against alias). A miss creates a new vertex.
    A vertex that gains, as an alias, another vertex's canonical name is merged with it
    (:func:`_absorb`): ``existing`` holds no vertex merged earlier.
    """
    res = Resolution()
    for row in existing.iter_rows(named=True):
        v = Vertex(
            row["id"],
            row["name"],
            row["entity_type"] or GENERIC_TYPE,
            row["description"] or "",
            list(row["aliases"] or []),
        )
        _register(res, v)
    _resolve_records(
        res, decisions.iter_rows(named=True) if isinstance(decisions, pl.DataFrame) else decisions
    )
    return res


def support_groups(name: str, aliases: Sequence[str], records: Iterable[Mapping[str, Any]]) -> list[set[str]]:
    """What the support left of one vertex (``name``, ``aliases``) makes of it: the entity records of
    ``records`` (``kind, name, entity_type, description, aliases``) that name one of its forms, resolved
    from nothing in their order, as the identity-key sets of the vertices they form (§4.6, issue 28).

    One set: the records still make one vertex. Several: a form the vertex holds came only from support
    that is gone (a linking document removed) — a fresh index of what remains would give that many vertices,
    so the vertex must split (:func:`pgrag_dag.graph.rederive.split_unsupported`). No set: no record names
    it."""
    keys = {identity_key(name), *(identity_key(a) for a in aliases)}
    res = Resolution()
    _resolve_records(
        res,
        (
            r
            for r in records
            if r.get("kind", "entity") == "entity"
            and keys & {identity_key(r["name"] or ""), *(identity_key(a) for a in r["aliases"] or [])}
        ),
    )
    return [{identity_key(f) for f in (v.name, *v.aliases)} for v in res.standing().vertices]


def _resolve_records(res: Resolution, rows: Iterable[Mapping[str, Any]]) -> None:
    """Resolve entity records (``name, entity_type, description, aliases``) into ``res``, in order: see
    :func:`resolve_entities`."""
    for row in rows:
        name = row["name"]
        aliases = list(row["aliases"] or [])
        idx = _find(res, name, aliases)
        if idx is None:
            v = Vertex(
                None, name, row["entity_type"] or GENERIC_TYPE, row["description"] or "", [], changed=True
            )
            merge_into(v, name, "", "", aliases)
            v.changed = True
            _register(res, v)
            continue
        v = res.vertices[idx]
        merge_into(v, name, row["entity_type"] or GENERIC_TYPE, row["description"] or "", aliases)
        _claim(res, idx)
        _absorb(res, idx)


def _absorb(res: Resolution, idx: int) -> None:
    """One name is one vertex (§4.6, issue 28): while the vertex ``idx`` holds, as an alias, the canonical
    name of another vertex, the two are merged — into the one with the longer canonical name (the record's
    vertex on a tie), so the survivor keeps a name no other row holds — and the other's forms point at the
    survivor (recorded in ``res.moved``: its mentions elsewhere resolve anew). The merged vertex keeps its
    row as history (:meth:`Resolution.merges`); an alias another vertex merely shares as an alias merges
    nothing ("Ada" may be two people)."""
    while True:
        v = res.vertices[idx]
        other = next(
            (
                j
                for a in v.aliases
                if (j := res.lookup.get(key := identity_key(a))) is not None
                and j != idx
                and identity_key(res.vertices[j].name) == key
            ),
            None,
        )
        if other is None:
            return
        keep, gone = (idx, other) if len(v.name) >= len(res.vertices[other].name) else (other, idx)
        g = res.vertices[gone]
        merge_into(res.vertices[keep], g.name, g.entity_type, g.description, g.aliases)
        g.merged_into = keep
        for form in (g.name, *g.aliases):
            key = identity_key(form)
            if res.lookup.get(key) == gone:
                res.moved.setdefault(key, gone)
                res.lookup[key] = keep
        _claim(res, keep)
        idx = keep


def _claim(res: Resolution, idx: int) -> None:
    """Point the vertex's forms at it where the lookup's order says so — a canonical name before any
    alias, among aliases the earliest vertex (lowest id) — the order a later run rebuilds the lookup in
    from the stored vertices (:func:`_register`, :func:`pgrag_dag.store.graph.entity_forms`); a form that
    moves is recorded in ``res.moved``."""
    v = res.vertices[idx]
    name_key = identity_key(v.name)
    for form in (v.name, *v.aliases):
        key = identity_key(form)
        cur = res.lookup.get(key)
        if cur == idx:
            continue
        if cur is None:
            res.lookup[key] = idx
        elif identity_key(res.vertices[cur].name) != key and (key == name_key or idx < cur):
            res.moved.setdefault(key, cur)
            res.lookup[key] = idx


def _find(res: Resolution, name: str, aliases: list[str]) -> int | None:
    """Name against canonical names and aliases; then the record's aliases against canonical names
    only (the Babbage → Charles Babbage upgrade). Alias never matches alias: two things that share a
    short form ("Ada") are not thereby one thing."""
    key = identity_key(name)
    if key in res.lookup:
        return res.lookup[key]
    for alias in aliases:
        idx = res.lookup.get(identity_key(alias))
        if idx is not None and identity_key(res.vertices[idx].name) == identity_key(alias):
            return idx
    return None


def _register(res: Resolution, v: Vertex) -> None:
    idx = len(res.vertices)
    res.vertices.append(v)
    res.lookup[identity_key(v.name)] = idx  # canonical names take precedence over aliases
    for alias in v.aliases:
        res.lookup.setdefault(identity_key(alias), idx)


def apply_enrichers(
    res: Resolution, enrichers: Sequence[BoundOperator], contexts: Sequence[OperatorContext]
) -> int:
    """Run a space's enrichers over the resolved vertices, in order; returns how many vertices they
    changed (relative to resolution).

    ``contexts`` holds one :class:`OperatorContext` per enricher. Each enricher receives the ``entities``
    frame (``id`` = the vertex's position in ``res``, name, entity_type, description, aliases, changed) and
    returns it with the same rows in the same order; it may change ``entity_type`` and ``description`` — never
    the canonical name, the aliases or the rows (§4.6: identity belongs to resolution). A vertex an enricher
    changed keeps what resolution decided in ``resolved_type`` / ``resolved_description``, so removing or
    changing an enricher re-derives the stored values from resolution, not from an earlier enricher's output.

    Raises :class:`ContractError` when an enricher's frame breaks :class:`EntityContract`, lacks one
    of those columns, reorders or drops rows, or changes a canonical name or aliases.
    """
    from pgrag_dag.errors import ContractError

    resolved = [(v.entity_type, v.description) for v in res.vertices]
    for e, ctx in zip(enrichers, contexts, strict=True):
        frame = res.entities().with_row_index("row").with_columns(id=pl.col("row").cast(pl.Int64)).drop("row")
        out = e.run(frame, ctx)
        label = f"EntityContract (operator {e.op.name})"
        missing = [c for c in ("id", "name", "entity_type", "description", "aliases") if c not in out.columns]
        if missing:
            raise ContractError(label, f"the enriched frame lacks column(s) {missing}")
        if out.height != frame.height:
            raise ContractError(label, f"an enricher must return its {frame.height} rows; got {out.height}")
        if out["id"].to_list() != frame["id"].to_list():
            raise ContractError(label, "an enricher must return its rows in the order it got them (by id)")
        for column, what in (("name", "a canonical name"), ("aliases", "aliases")):
            moved = out.with_row_index("_r").filter(pl.col(column) != frame[column])
            if moved.height:
                raise ContractError(
                    label,
                    f"an enricher may not change {what} (e.g. of {frame['name'][moved['_r'][0]]!r})",
                    moved.select("id", "name"),
                )
        for v, etype, desc in zip(res.vertices, out["entity_type"].to_list(), out["description"].to_list()):
            v.entity_type, v.description = etype or GENERIC_TYPE, desc or ""
    enriched = 0
    for v, (rtype, rdesc) in zip(res.vertices, resolved):
        v.resolved_type = rtype if v.entity_type != rtype else None
        v.resolved_description = rdesc if v.description != rdesc else None
        enriched += v.resolved_type is not None or v.resolved_description is not None
    return enriched
