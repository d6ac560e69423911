"""Attributes follow support (paper §4.6, §4.7; issue 28): an entity's name, type, description and aliases,
and a relation's description, provenance, weight, confidence and validity, derived again from the support
that remains — with the same merge rules the stages apply when records arrive
(:func:`pgrag_dag.graph.resolution.merge_into`, :func:`pgrag_dag.graph.relations.build_relations`), so that
no attribute keeps a value only removed support gave it.

:func:`rederive_entity` and :func:`rederive_relation` are pure folds over decision records;
:func:`rederive_attributes` reads the support left in the store (:mod:`pgrag_dag.store.support`), folds
it and writes what changed, in the caller's transaction — erasure (``pgrag purge``) calls it for the graph
rows a purged document shared with others, and any removal of support can.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import polars as pl
import psycopg

from pgrag_dag.frames import Vertex
from pgrag_dag.gate_rules import identity_key
from pgrag_dag.graph.relations import build_relations, render_relation
from pgrag_dag.graph.resolution import GENERIC_TYPE, merge_into, support_groups
from pgrag_dag.store import graph, support


def entity_keys(name: str, aliases: Iterable[str]) -> set[str]:
    """The identity keys of an entity's canonical name and aliases: the forms that resolve to it."""
    return {identity_key(name), *(identity_key(a) for a in aliases)}


def rederive_entity(current: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> Vertex:
    """The entity ``current`` (``id, name, entity_type, description, aliases``) as its remaining ``records``
    make it: the accepted decisions (``kind, name, entity_type, description, aliases, subject, object``) of
    the chunks that still mention it, in resolution's order.

    The entity records naming it (by a form of ``current``, or naming its canonical name as an alias) are
    folded as resolution folds them — the first one starts the vertex, each later one is merged under §4.6
    (longest name canonical, specific type over ``Concept``, longest description, aliases unioned). With no
    such record (it is still mentioned, through a triple's endpoint) it keeps its name when a remaining triple
    names it so, else the longest remaining form, keeps its type, and has no description; its aliases are the
    current ones a remaining triple uses. ``changed`` says whether anything differs from ``current``."""
    keys = entity_keys(current["name"], current["aliases"] or [])
    name_key = identity_key(current["name"])
    v: Vertex | None = None
    forms: list[str] = []
    for r in records:
        if r["kind"] == "triple":
            forms += [f for f in (r["subject"], r["object"]) if f and identity_key(f) in keys]
            continue
        aliases = list(r["aliases"] or [])
        if identity_key(r["name"] or "") not in keys and name_key not in {identity_key(a) for a in aliases}:
            continue
        if v is None:
            v = Vertex(current["id"], r["name"], r["entity_type"] or GENERIC_TYPE, r["description"] or "", [])
            merge_into(v, r["name"], "", "", aliases)
        else:
            merge_into(v, r["name"], r["entity_type"] or GENERIC_TYPE, r["description"] or "", aliases)
    if v is None:
        seen = {identity_key(f) for f in forms}
        longest = max(forms, key=lambda f: (len(f), f), default=current["name"])
        name = current["name"] if name_key in seen else longest
        aliases = [a for a in current["aliases"] or [] if identity_key(a) in seen - {identity_key(name)}]
        v = Vertex(current["id"], name, current["entity_type"] or GENERIC_TYPE, "", aliases)
    v.changed = (v.name, v.entity_type, v.description, list(v.aliases)) != (
        current["name"],
        current["entity_type"],
        current["description"],
        list(current["aliases"] or []),
    )
    return v


def rederive_relation(
    current: Mapping[str, Any],
    remaining: Sequence[int],
    triples: Sequence[Mapping[str, Any]],
    forms: tuple[set[str], set[str]],
    names: tuple[str, str],
) -> dict[str, Any]:
    """The relation ``current`` (``id, source_id, target_id, predicate, negated, confidence, payload``) as
    its ``remaining`` supporting chunk ids state it: ``triples`` are accepted triple decisions of those
    chunks in document order; ``forms`` the identity keys of the source's and the target's forms; ``names``
    their canonical names (for ``rendered``). The triples stating this edge are grouped as the relations
    stage groups them (:func:`~pgrag_dag.graph.relations.build_relations`: longest description, highest
    confidence, the hull of the stated periods). Returns ``{"id", "description", "chunk_ids" (the
    remaining ones), "weight", "confidence", "payload", "rendered"}``; with no stating triple left (only
    archived chunks support it) the description is empty and the rest is kept."""
    src_keys, dst_keys = forms
    stating = [
        t
        for t in triples
        if t["predicate"] == current["predicate"]
        and bool(t["negated"]) == bool(current["negated"])
        and identity_key(t["subject"]) in src_keys
        and identity_key(t["object"]) in dst_keys
    ]
    payload = dict(current["payload"] or {})
    description, confidence = "", float(current["confidence"])
    if stating:
        lookup = {identity_key(t["subject"]): current["source_id"] for t in stating}
        lookup |= {identity_key(t["object"]): current["target_id"] for t in stating}
        built = build_relations(
            pl.DataFrame(list(stating), infer_schema_length=None),
            lookup,
            {current["source_id"]: names[0], current["target_id"]: names[1]},
        ).relations
        if built.height:
            row = built.row(0, named=True)
            description, confidence = row["description"], row["confidence"]
            for k in ("valid_from", "valid_to"):
                payload.pop(k, None)
                if row[k]:
                    payload[k] = row[k]
    return {
        "id": current["id"],
        "description": description,
        "chunk_ids": sorted(remaining),
        "weight": len(remaining),
        "confidence": confidence,
        "payload": payload,
        "rendered": render_relation(
            names[0],
            current["predicate"],
            names[1],
            negated=bool(current["negated"]),
            description=description,
        ),
    }


def rederive_attributes(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    entity_ids: Sequence[int],
    relation_ids: Sequence[int],
    without_chunks: Sequence[int] = (),
) -> dict[str, int]:
    """Derive again, from the support left once ``without_chunks`` (chunk ids, live or archived) no longer
    count, the attributes of entities ``entity_ids`` (:func:`rederive_entity`) and of relations
    ``relation_ids`` plus every relation touching an entity whose name changed (:func:`rederive_relation`),
    and write what changed (:func:`pgrag_dag.store.support.write_entities` / ``write_relations``: changed
    rows lose their vectors until the embeddings stage runs), in the caller's transaction — which holds the
    partition lock. Run it after the removed support's rows are gone or with them in ``without_chunks``.

    Where the derived canonical name is another entity's canonical name (the unique index allows a name once;
    merging them is resolution's job), the longest remaining form no other entity holds is canonical instead;
    with none, the entity keeps its name. Returns ``{"entities": changed, "relations":
    changed}``."""
    without = set(without_chunks)
    ents = support.entities(conn, realm, space, entity_ids)
    records: dict[int, list[dict[str, Any]]] = {}
    for r in support.entity_decisions(conn, realm, space, entity_ids, sorted(without)):
        records.setdefault(int(r["entity_id"]), []).append(r)
    derived = [rederive_entity(e, records.get(int(e["id"]), [])) for e in ents]
    taken = support.taken_names(conn, realm, space, [f for v in derived for f in (v.name, *v.aliases)])
    renamed: list[int] = []
    rows = []
    for e, v in zip(ents, derived):
        # the longest of its remaining forms no other entity holds as its canonical name
        free = [f for f in (v.name, *sorted(v.aliases, key=len, reverse=True))
                if taken.get(f.lower(), e["id"]) == e["id"]]  # fmt: skip
        if free and free[0] != v.name:
            v.aliases = [a for a in v.aliases if a != free[0]] + [v.name]
            v.name = free[0]
        elif not free:
            v.name = e["name"]
        if v.name != e["name"]:
            renamed.append(int(e["id"]))
        if (v.name, v.entity_type, v.description, v.aliases) != (
            e["name"],
            e["entity_type"],
            e["description"],
            list(e["aliases"] or []),
        ) or v.changed:
            rows.append(
                {"id": e["id"], "name": v.name, "entity_type": v.entity_type, "description": v.description,
                 "aliases": v.aliases}
            )  # fmt: skip
    changed_entities = support.write_entities(conn, realm, space, rows)
    rel_ids = sorted(set(relation_ids) | set(support.relations_touching(conn, realm, space, renamed)))
    rels = support.relations(conn, realm, space, rel_ids)
    ends = {i for r in rels for i in (r["source_id"], r["target_id"])}
    by_id = {int(e["id"]): e for e in support.entities(conn, realm, space, sorted(ends))}
    remaining = {int(r["id"]): [c for c in r["chunk_ids"] if c not in without] for r in rels}
    triples = support.triple_decisions(
        conn, realm, space, sorted({c for cs in remaining.values() for c in cs})
    )
    by_chunk: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for i, t in enumerate(triples):
        by_chunk.setdefault(int(t["chunk_id"]), []).append((i, t))
    # a remaining triple may still name an endpoint by a form re-derivation just dropped: both sets resolve
    before = {int(e["id"]): entity_keys(e["name"], e["aliases"] or []) for e in ents}

    def forms(e: dict[str, Any]) -> set[str]:
        return entity_keys(e["name"], e["aliases"] or []) | before.get(int(e["id"]), set())

    out = []
    for r in rels:
        src, dst = by_id[r["source_id"]], by_id[r["target_id"]]
        mine = sorted((x for c in remaining[int(r["id"])] for x in by_chunk.get(c, [])), key=lambda x: x[0])
        out.append(
            rederive_relation(
                r,
                remaining[int(r["id"])],
                [t for _, t in mine],  # document order, as the relations stage reads them
                (forms(src), forms(dst)),
                (src["name"], dst["name"]),
            )
        )
    return {"entities": changed_entities, "relations": support.write_relations(conn, realm, space, out)}


def split_unsupported(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    candidates: Sequence[int] | None,
    pending: Sequence[Mapping[str, Any]] = (),
) -> list[int]:
    """One vertex per name, and no more than the support says (§4.6, issue 28): a vertex whose aliases
    link forms that no remaining record links — the document that said "De Treville, called Treville"
    removed — splits, as a fresh index of what remains would. Of ``candidates`` (entity ids; every vertex of
    the space with ``None``) holding an alias, each whose remaining entity records (those of the chunks
    mentioning it plus ``pending``, the accepted decisions of chunks about to be resolved) form several
    vertices (:func:`pgrag_dag.graph.resolution.support_groups`) keeps the forms of the group holding its
    canonical name (else of the largest group) and loses, as aliases, those of its forms another group
    holds (a form no remaining record names is re-derivation's to drop); a fragment merged into it
    under a lost form is a vertex again (``merged_into`` null). Run it in the resolution stage's transaction
    before resolving: the caller re-resolves the chunks mentioning the returned entity ids (the split
    vertices and un-merged fragments), which sends the lost forms' records to their own vertices — or merges
    them again where a chain of remaining records links them — and derives the returned entities again."""
    ents = graph.aliased_entities(conn, realm, space, candidates)
    if not ents:
        return []
    by_key: dict[str, list[int]] = {}  # pending records by the forms they name: one pass, not one per entity
    for i, p in enumerate(pending):
        for key in entity_keys(p["name"] or "", p["aliases"] or []):
            by_key.setdefault(key, []).append(i)
    rows, lost = [], {}
    for e, mine_records in _with_records(conn, realm, space, ents):
        mine = sorted({i for k in entity_keys(e["name"], e["aliases"]) for i in by_key.get(k, [])})
        groups = support_groups(e["name"], e["aliases"], [*mine_records, *(pending[i] for i in mine)])
        if len(groups) < 2:
            continue
        name_key = identity_key(e["name"])
        keep = next((g for g in groups if name_key in g), max(groups, key=len))
        # its forms another group took (a group merely sharing an alias — "Milady" of two people — takes none)
        gone = (entity_keys(e["name"], e["aliases"]) - keep) & set().union(
            *(g for g in groups if g is not keep)
        )
        if not gone:
            continue
        lost[int(e["id"])] = gone
        rows.append({**e, "aliases": [a for a in e["aliases"] if identity_key(a) not in gone]})
    if not rows:
        return []
    support.write_entities(conn, realm, space, rows)
    fragments = [
        f
        for f, name, s in graph.merged_fragments(conn, realm, space, sorted(lost))
        if identity_key(name) in lost[s]
    ]
    graph.clear_merges(conn, realm, space, fragments)
    return sorted({*lost, *fragments})


SPLIT_BATCH = 2000
"""Entities whose remaining records :func:`split_unsupported` reads at once (a full run checks every aliased
vertex of the space: their records are read batch by batch, issue 30)."""


def _with_records(
    conn: psycopg.Connection, realm: str, space: str, ents: Sequence[Mapping[str, Any]]
) -> Iterator[tuple[Mapping[str, Any], list[Mapping[str, Any]]]]:
    """Each entity of ``ents`` in order with its remaining entity records
    (:func:`pgrag_dag.store.support.entity_decisions`), read :data:`SPLIT_BATCH` entities at a time."""
    for at in range(0, len(ents), SPLIT_BATCH):
        part = ents[at : at + SPLIT_BATCH]
        records: dict[int, list[Mapping[str, Any]]] = {}
        ids = [int(e["id"]) for e in part]
        for r in support.entity_decisions(conn, realm, space, ids, entities_only=True):
            records.setdefault(int(r["entity_id"]), []).append(r)
        for e in part:
            yield e, records.get(int(e["id"]), [])
