"""Read SQL for the relation channels, communities and graph distance (paper §6, §7.2–7.4).

Companion of :mod:`pgrag_dag.store.retrieval` (traversal, seeds, mention expansion), with the same
rules: one realm schema composed with ``psycopg.sql.Identifier``, one space or the read-only
wildcard ``"*"``, values as parameters, and every relation read constrained by
:func:`~pgrag_dag.store.retrieval.relation_filter` (never dormant; valid at ``as_of``; believed at
``believed_at``; not superseded unless asked; of the requested types). A relation is returned only
when both endpoints are non-dormant vertices of the relation's own space, so a mis-scoped edge
never surfaces a vertex of another space.

Channels (§7.3):

- :func:`relation_similarity` — HNSW search over relation embeddings (cosine; ``score`` is
  similarity ``1 - distance``), with pgvector's relaxed iterative scan so filters never starve it;
- :func:`relation_fulltext` — ``websearch_to_tsquery('english', text)`` against
  the stored ``rendered_tsv`` = ``to_tsvector('english', rendered)`` (GIN index ``relations_fts_tsv``), ranked
  by ``ts_rank_cd``;
- :func:`relation_keyword_overlap` — global mode without relation embeddings: keywords matched,
  then corroboration ``weight`` (by ``weight`` alone when no keyword matches).

Every relation row has ``id, space, source_id, target_id, subject, object`` (endpoint names),
``predicate, description, negated, valid_from, valid_to, weight, confidence, t_created, t_expired,
superseded_by, superseded`` (in the state read), ``hop`` (always 1: these channels never walked)
and ``score``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, LiteralString

import numpy as np
import psycopg
from psycopg import sql

from pgrag_dag.store.identifiers import qualified
from pgrag_dag.store.retrieval import (
    Row,
    belief_columns,
    entity_live,
    fetch,
    in_space,
    relation_filter,
    scope_params,
)
from pgrag_dag.store.vector_index import distance, exact_distance
from pgrag_dag.temporal import CURRENT, Temporal

_RELATION: LiteralString = """
    SELECT r.id, r.space, r.source_id, r.target_id, a.name AS subject, b.name AS object, r.predicate,
           r.description, r.negated, r.valid_from, r.valid_to, r.weight, r.confidence, r.t_created,
           {belief}, 1 AS hop"""

_ENDPOINTS: LiteralString = """
      JOIN {e} AS a ON a.id = r.source_id AND a.space = r.space AND {a_live}
      JOIN {e} AS b ON b.id = r.target_id AND b.space = r.space AND {b_live}"""


def _parts(
    realm: str, space: str, temporal: Temporal, relation_types: Sequence[str] | None
) -> dict[str, Any]:
    return {
        "r": qualified(realm, "relations"),
        "e": qualified(realm, "entities"),
        "in_space": in_space("r", space),
        "ok": relation_filter("r", temporal, typed=relation_types is not None, realm=realm),
        "belief": belief_columns("r", temporal, realm=realm),
        "a_live": entity_live("a", temporal, realm=realm),
        "b_live": entity_live("b", temporal, realm=realm),
        "n_live": entity_live("n", temporal, realm=realm),
    }


def relation_similarity(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    qvec: np.ndarray,
    k: int,
    *,
    temporal: Temporal = CURRENT,
    relation_types: Sequence[str] | None = None,
) -> list[Row]:
    """The ``k`` relations whose embedding is nearest ``qvec`` (shape ``(dim,)``), nearest first (§7.3).

    Relations without an embedding are never returned. ``score``: cosine similarity.
    """
    if k <= 0:
        return []
    query = sql.SQL(
        """
        WITH hits AS MATERIALIZED (
            SELECT r.id, {exact} AS distance
              FROM {r} AS r"""
        + _ENDPOINTS
        + """
             WHERE {in_space} AND r.embedding IS NOT NULL AND {ok}
             ORDER BY {dist}
             LIMIT %(k)s)"""
        + _RELATION
        + """, 1 - h.distance AS score
          FROM hits AS h JOIN {r} AS r ON r.id = h.id"""
        + _ENDPOINTS
        + """
         ORDER BY h.distance, r.id"""
    ).format(
        **_parts(realm, space, temporal, relation_types),
        dist=distance("r", len(qvec)),
        exact=exact_distance("r"),
    )
    params = {"q": qvec, "k": k, "space": space, **scope_params(temporal, relation_types)}
    return fetch(conn, query, params, vector=True)


_WORD = re.compile(r"[\w'’-]+", re.UNICODE)


def fulltext_query(terms: Iterable[str]) -> str:
    """A ``websearch_to_tsquery`` text matching any of ``terms``: multi-word terms become quoted
    phrases, joined by ``or``; quotes and operators inside a term are dropped. ``""`` for no words.

    >>> fulltext_query(["Walt Disney", "revenue", 'x" OR y', "revenue"])
    '"Walt Disney" or revenue or "x y"'
    """
    out: list[str] = []
    for term in terms:
        words = [w.strip("'’-") for w in _WORD.findall(term)]
        words = [w for w in words if w and w.lower() != "or"]
        if words:
            out.append(words[0] if len(words) == 1 else '"' + " ".join(words) + '"')
    return " or ".join(dict.fromkeys(out))


def relation_fulltext(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    text: str,
    k: int,
    *,
    temporal: Temporal = CURRENT,
    relation_types: Sequence[str] | None = None,
) -> list[Row]:
    """The ``k`` relations whose rendered form best matches ``websearch_to_tsquery('english', text)``
    (§7.3 lexical channel), ranked by ``ts_rank_cd`` (``score``), then id. ``text`` is typically
    :func:`fulltext_query` of the keywords; a text without lexemes matches nothing.
    """
    if k <= 0 or not text.strip():
        return []
    query = sql.SQL(
        """
        WITH q AS (SELECT websearch_to_tsquery('english', %(text)s) AS q),
        hits AS MATERIALIZED (
            SELECT r.id, ts_rank_cd(r.rendered_tsv, q.q) AS score
              FROM q, {r} AS r"""
        + _ENDPOINTS
        + """
             WHERE numnode(q.q) > 0 AND r.rendered_tsv @@ q.q AND {in_space} AND {ok}
             ORDER BY score DESC, r.id
             LIMIT %(k)s)"""
        + _RELATION
        + """, h.score
          FROM hits AS h JOIN {r} AS r ON r.id = h.id"""
        + _ENDPOINTS
        + """
         ORDER BY h.score DESC, r.id"""
    ).format(**_parts(realm, space, temporal, relation_types))
    params = {"text": text, "k": k, "space": space, **scope_params(temporal, relation_types)}
    return fetch(conn, query, params)


def relation_keyword_overlap(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    keywords: Sequence[str],
    k: int,
    *,
    temporal: Temporal = CURRENT,
    relation_types: Sequence[str] | None = None,
) -> list[Row]:
    """Global-mode ranking without relation embeddings (§7.2): the ``k`` relations whose rendered
    form matches the most ``keywords`` (each an English full-text phrase; ``score`` = number
    matched), ties broken by corroboration ``weight`` (descending), then id.

    When no relation matches any keyword (or ``keywords`` hold no word), the ``k`` relations of
    highest ``weight`` (then id) are returned instead, each with ``score`` 0: a global question with
    no word in common with the graph still gets the space's best-corroborated relations, never an
    empty list. Both reads apply the same scope, temporal and ``relation_types`` predicates, so the
    fallback is empty only when no relation passes them. The fallback reads every relation of the
    space that passes them (no index orders by weight): it runs only after the indexed match found
    nothing. ``[]`` when ``k <= 0``.
    """
    if k <= 0:
        return []
    terms = [t for t in dict.fromkeys(kw.strip() for kw in keywords) if t]
    text = fulltext_query(terms)
    parts = _parts(realm, space, temporal, relation_types)
    params = {"k": k, "space": space, **scope_params(temporal, relation_types)}
    if text:
        query = sql.SQL(
            """
            WITH q AS (SELECT websearch_to_tsquery('english', %(text)s) AS q),
            hits AS MATERIALIZED (
                SELECT r.id,
                       (SELECT count(*) FROM unnest(%(terms)s::text[]) AS kw
                         WHERE r.rendered_tsv @@ phraseto_tsquery('english', kw)) AS score
                  FROM q, {r} AS r"""
            + _ENDPOINTS
            + """
                 WHERE numnode(q.q) > 0 AND r.rendered_tsv @@ q.q AND {in_space} AND {ok})
            """
            + _RELATION
            + """, h.score
              FROM hits AS h JOIN {r} AS r ON r.id = h.id"""
            + _ENDPOINTS
            + """
             WHERE h.score > 0
             ORDER BY h.score DESC, r.weight DESC, r.id
             LIMIT %(k)s"""
        ).format(**parts)
        matched = fetch(conn, query, {**params, "text": text, "terms": terms})
        if matched:
            return matched
    by_weight = sql.SQL(
        _RELATION
        + """, 0 AS score
          FROM {r} AS r"""
        + _ENDPOINTS
        + """
         WHERE {in_space} AND {ok}
         ORDER BY r.weight DESC, r.id
         LIMIT %(k)s"""
    ).format(**parts)
    return fetch(conn, by_weight, params)


def relation_embeddings(conn: psycopg.Connection, realm: str, ids: Sequence[int]) -> dict[int, np.ndarray]:
    """Stored embeddings of relation ids, as ``{id: float32 vector}``; ids without one are absent."""
    if not ids:
        return {}
    query = sql.SQL(
        "SELECT id, embedding::real[] AS embedding FROM {r} WHERE id = ANY(%(ids)s) AND embedding IS NOT NULL"
    ).format(r=qualified(realm, "relations"))
    return {
        int(row["id"]): np.asarray(row["embedding"], dtype=np.float32)
        for row in fetch(conn, query, {"ids": sorted(set(ids))})
    }


def entity_distances(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    seeds: Sequence[int],
    targets: Iterable[int],
    *,
    max_depth: int,
    temporal: Temporal = CURRENT,
    relation_types: Sequence[str] | None = None,
) -> dict[int, int]:
    """Graph distance (edges) from the nearest seed to each entity of ``targets`` (§7.4 node distance).

    Breadth-first over live edges only — the relations :func:`relation_filter` admits, in both
    directions, within one space, to non-dormant vertices — one query per level, at most
    ``max_depth`` levels, stopping once every target is placed. Seeds are at distance 0; targets
    farther than ``max_depth`` or unconnected are absent.
    """
    wanted = set(targets)
    dist = {int(s): 0 for s in seeds}
    frontier = sorted(dist)
    query = sql.SQL("""
        SELECT DISTINCT n.id FROM (
            SELECT r.space, r.source_id AS here, r.target_id AS there FROM {r} AS r
             WHERE r.source_id = ANY(%(frontier)s) AND {in_space} AND {ok}
            UNION ALL
            SELECT r.space, r.target_id, r.source_id FROM {r} AS r
             WHERE r.target_id = ANY(%(frontier)s) AND {in_space} AND {ok}) AS step
          JOIN {e} AS f ON f.id = step.here AND f.space = step.space
          JOIN {e} AS n ON n.id = step.there AND n.space = step.space AND {n_live}""").format(
        **_parts(realm, space, temporal, relation_types)
    )
    params = {"space": space, **scope_params(temporal, relation_types)}
    for depth in range(1, max_depth + 1):
        if not frontier or wanted <= dist.keys():
            break
        reached = [int(row["id"]) for row in fetch(conn, query, {**params, "frontier": frontier})]
        frontier = sorted(i for i in reached if i not in dist)
        dist.update((i, depth) for i in frontier)
    return {i: d for i, d in dist.items() if i in wanted}


def community_search(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    qvec: np.ndarray,
    k: int,
    *,
    temporal: Temporal = CURRENT,
) -> list[Row]:
    """The ``k`` community reports (any level) nearest ``qvec`` in ``space`` (§6, §7.1 global).

    With ``temporal.believed_at`` the reports believed then are read: those built at or before it and
    still current, and those a later rebuild replaced (``communities_expired``, built at or before it and
    replaced after it; issue 28). Rows: ``id, space, level, title, summary, findings, rating, size, report,
    built_at, distance, score`` (cosine similarity), nearest first.
    """
    if k <= 0:
        return []
    dist = distance("c", len(qvec))
    part = sql.SQL("""(SELECT c.id, c.space, c.level, c.title, c.summary, c.findings, c.rating, c.size,
                   c.report, c.built_at, {exact} AS distance FROM {c} AS c
             WHERE {in_space} AND c.embedding IS NOT NULL AND {known}
             ORDER BY {dist} LIMIT %(k)s)""")
    current = part.format(
        dist=dist,
        exact=exact_distance("c"),
        c=qualified(realm, "communities"),
        in_space=in_space("c", space),
        known=sql.SQL("TRUE") if temporal.believed_at is None else sql.SQL("c.built_at <= %(believed_at)s"),
    )
    if temporal.believed_at is not None:
        replaced = part.format(
            dist=dist,
            exact=exact_distance("c"),
            c=qualified(realm, "communities_expired"),
            in_space=in_space("c", space),
            known=sql.SQL("c.built_at <= %(believed_at)s AND c.t_expired > %(believed_at)s"),
        )
        current = sql.SQL("{} UNION ALL {}").format(current, replaced)
    query = sql.SQL("""
        WITH hits AS MATERIALIZED ({parts})
        SELECT *, 1 - distance AS score FROM hits ORDER BY distance, id LIMIT %(k)s""").format(parts=current)
    return fetch(conn, query, {"q": qvec, "k": k, "space": space, **temporal.params()}, vector=True)


def communities_checked(conn: psycopg.Connection, realm: str, spaces: Sequence[str]) -> dict[str, datetime]:
    """When the communities stage of each space last read the whole graph and found its reports up to date —
    built from it, or found it unchanged (``graph_checked``, :func:`pgrag_dag.store.history.mark_checked`).
    Spaces never checked are absent."""
    if not spaces:
        return {}
    query = sql.SQL(
        "SELECT space, checked_at FROM {} WHERE stage = 'communities' AND space = ANY(%(spaces)s)"
    ).format(qualified(realm, "graph_checked"))
    return {
        str(row["space"]): row["checked_at"] for row in fetch(conn, query, {"spaces": sorted(set(spaces))})
    }


def last_graph_write(conn: psycopg.Connection, realm: str, spaces: Sequence[str]) -> dict[str, datetime]:
    """The instant of the last write to each space's graph: the latest relation ``t_created``,
    ``t_expired`` or ``dormant_since`` and entity ``t_updated`` or ``dormant_since``. Spaces with
    no graph are absent."""
    if not spaces:
        return {}
    query = sql.SQL("""
        SELECT space, max(at) AS at FROM (
            SELECT space, greatest(max(t_created), max(t_expired), max(dormant_since)) AS at
              FROM {r} WHERE space = ANY(%(spaces)s) GROUP BY space
            UNION ALL
            SELECT space, greatest(max(t_updated), max(dormant_since)) FROM {e}
             WHERE space = ANY(%(spaces)s) GROUP BY space) AS w
         WHERE at IS NOT NULL GROUP BY space""").format(
        r=qualified(realm, "relations"), e=qualified(realm, "entities")
    )
    return {str(row["space"]): row["at"] for row in fetch(conn, query, {"spaces": sorted(set(spaces))})}
