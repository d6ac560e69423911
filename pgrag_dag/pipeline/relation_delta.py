"""What an incremental ``relations`` run must rebuild (issue 15; the edges of §4.7, supersession of §5.2).

Supersession is decided per ordered entity pair (source, target), so the unit of incremental work is the
pair: every edge of an affected pair is rebuilt from *all* the accepted triples supporting it, and every
other pair is left as stored. A pair is affected when

- a chunk whose gate decisions changed (added, re-gated, removed) or whose document order changed
  supported one of its stored edges, or now states a triple that resolves to it;
- one of its endpoints is an entity whose forms changed (inserted, renamed, a new alias), or holds a form
  such an entity now holds (a triple endpoint with that form may resolve elsewhere now) — the edges of
  both are rebuilt, and the chunks of self-loop rejections naming that form are read again;
- it holds a stored edge with a single-valued predicate (issue 27) on the subject (object) of an affected
  pair whose side of one value is the object (subject): single-valued supersession spans pairs, so the
  rivals of an affected pair are rebuilt with it
  (:func:`~pgrag_dag.store.relations.single_valued_rivals`).

The triples read are those of the changed chunks and of every chunk supporting a stored edge of an affected
pair, so each rebuilt edge has its complete support. A triple read that is new (a changed chunk's) or names a
changed form and resolves to a pair not yet affected makes that pair affected too, and its support is read
(repeated until no such pair is left); the other triples of those chunks resolve as stored, to pairs that did
not change, and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import psycopg

from pgrag_dag.gate_rules import identity_key
from pgrag_dag.store import relations as relation_store
from pgrag_dag.store import staging
from pgrag_dag.store.graph import EntityForms
from pgrag_dag.store.work_queue import Work


@dataclass
class RelationDelta:
    """``pairs`` (source_id, target_id) to rebuild, ``chunks`` whose triples were read, and ``triples``
    (the accepted ``gate_decisions`` triple rows of those chunks in document order)."""

    pairs: set[tuple[int, int]]
    chunks: set[int]
    triples: pl.DataFrame

    def of_pairs(self, relations: pl.DataFrame) -> pl.DataFrame:
        """The rows of a built ``relations`` frame whose (source_id, target_id) is an affected pair."""
        keep = pl.DataFrame(
            [(s, t) for s, t in self.pairs],
            schema={"source_id": pl.Int64, "target_id": pl.Int64},
            orient="row",
        )
        return relations.join(keep, on=["source_id", "target_id"], how="semi", maintain_order="left")


def relation_delta(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    todo: Work,
    forms: EntityForms,
    single_valued: dict[str, str] | None = None,
) -> RelationDelta:
    """The :class:`RelationDelta` of the queued work ``todo`` (chunks and entities) — see the module
    docstring; ``single_valued`` is the space's vocabulary's (predicate → side of one value). ``forms``
    (the space's entity forms, read as needed) ends up holding every endpoint of the triples read."""
    forms.load_ids(todo.entities)
    changed_entities = {e for e in todo.entities if e in forms.names}
    keys = forms.keys_of(changed_entities)
    forms.load(keys)
    holders = set().union(*(forms.holders.get(k, set()) for k in keys)) if keys else set()
    seeds = set(todo.chunks)
    if keys:
        seeds |= {
            c
            for c, s, o in staging.rejection_endpoints(conn, realm, space)
            if identity_key(s) in keys or identity_key(o) in keys
        }
    stored = relation_store.edges_touching(
        conn, realm, space, chunk_ids=sorted(seeds), entity_ids=sorted(changed_entities | holders)
    )
    pairs = {(s, t) for s, t, _ in stored}
    chunks = set(seeds)
    read: set[int] = set()
    loaded: set[tuple[int, int]] = set()
    while True:  # until no triple read resolves to a pair not yet rebuilt
        fresh = sorted(pairs - loaded)
        loaded |= set(fresh)
        chunks |= (
            {c for _, _, cs in relation_store.edges_touching(conn, realm, space, pairs=fresh) for c in cs}
            if fresh
            else set()
        )
        batch = sorted(chunks - read)
        read |= set(batch)
        found = relation_store.single_valued_rivals(conn, realm, space, fresh, single_valued or {})
        if batch:
            rows = staging.load_decisions(conn, realm, space, chunk_ids=batch).filter(
                pl.col("kind") == "triple"
            )
            ends = [
                (c, identity_key(s), identity_key(o))
                for c, s, o in rows.select("chunk_id", "subject", "object").iter_rows()
            ]
            forms.load({k for _, sk, ok in ends for k in (sk, ok)})
            for chunk, sk, ok in ends:
                if (
                    chunk in seeds or sk in keys or ok in keys
                ):  # new, or an endpoint that may resolve elsewhere now
                    s, o = forms.resolve(sk), forms.resolve(ok)
                    if s is not None and o is not None and s != o:
                        found.add((s, o))
        if not found - pairs:
            break
        pairs |= found
    triples = (
        staging.load_decisions(conn, realm, space, chunk_ids=sorted(chunks)).filter(
            pl.col("kind") == "triple"
        )
        if chunks
        else pl.DataFrame(schema=staging.DECISION_SCHEMA)
    )
    return RelationDelta(pairs, chunks, triples)
