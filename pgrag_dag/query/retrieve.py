"""Retrieval for one query (paper §7.2–7.4): conditioning each (sub-)question into its probe texts,
the entity-anchored reads (seeds, mention expansion, traversal) and the independent ones (chunk search,
relation similarity and full-text, ranked relations, communities) in one database snapshot, their
fusion, and the merge into a :class:`~pgrag_dag.query_param.QueryResult`.
:func:`pgrag_dag.query.run.query_data` calls these in order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from pgrag_dag.errors import QueryError, SchemaMismatchError
from pgrag_dag.providers.embedding import Embedder
from pgrag_dag.providers.llm import ModelClient
from pgrag_dag.query import fusion as fuse
from pgrag_dag.query import keywords as kw
from pgrag_dag.query import walked
from pgrag_dag.query_param import (
    CHUNK_CHANNELS,
    EVIDENCE,
    QueryParam,
    QueryResult,
)
from pgrag_dag.store import db, retrieval, walk_graph
from pgrag_dag.store import retrieval_channels as channels
from pgrag_dag.store.embedding_columns import check_embedding

logger = logging.getLogger(__name__)


# -- conditioning ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One (sub-)question and its conditioning (§7.2)."""

    text: str
    keywords: kw.Keywords

    @classmethod
    def conditioned(cls, text: str, param: QueryParam, client: ModelClient | None) -> Probe:
        """Keywords per ``param.keywords``; none in bypass mode, nor in naive mode unless its chunk search
        runs the full-text channel (keywords are its text, :attr:`fulltext`)."""
        lexical_chunks = "fulltext" in param.chunk_channels
        if (
            param.keywords == "off"
            or param.mode == "bypass"
            or (param.mode == "naive" and not lexical_chunks)
        ):
            return cls(text, kw.Keywords(source="off"))
        return cls(text, kw.extract(text, client if param.keywords == "model" else None))

    @property
    def entity_text(self) -> str:
        """The question with its low-level keywords appended: the entity query text."""
        return " ".join([self.text, *self.keywords.low_level])

    @property
    def global_text(self) -> str:
        """The question with its high-level keywords appended: the ranked-relation and community text."""
        return " ".join([self.text, *self.keywords.high_level])

    @property
    def fulltext(self) -> str:
        """The full-text channels' ``websearch_to_tsquery`` text (relations and chunks): the low-level
        keywords (the exact names and terms it exists for, §7.3), any of them, else the high-level ones,
        else the question's words. Themes are the similarity and ranking channels' work; on a large graph
        they match thousands of relations, and PostgreSQL's ranking has no inverse document frequency to
        discount them (measured on chunks: evaluation/README.md, "Chunk recall")."""
        terms = list(self.keywords.low_level) or list(self.keywords.high_level) or self.text.split()
        return channels.fulltext_query(terms)

    def texts(self, param: QueryParam) -> list[str]:
        """The texts to embed for ``param``'s mode: the question (unless no vector read uses it — e.g.
        naive mode with only the full-text chunk channel), the entity text, the global text."""
        evidence = EVIDENCE[param.mode]
        question_read = ("chunks" in evidence and "vector" in param.chunk_channels) or (
            "similarity" in evidence and "similarity" in param.relation_channels
        )
        out = [self.text] if question_read else []
        if "entities" in evidence:
            out.append(self.entity_text)
        if evidence & {"ranked", "communities"}:
            out.append(self.global_text)
        return out


# -- retrieval ------------------------------------------------------------------------------------


def check_scope(conn: psycopg.Connection, realm: str, space: str, embedder: Embedder) -> None:
    """Refuse a query of a realm never indexed or a space it does not hold (:class:`QueryError`), and an
    ``embedder`` of another model, width or convention than the realm's (:class:`SchemaMismatchError`,
    §3.5)."""
    registered, space_found = retrieval.read_scope(conn, realm, space)
    if registered is None:
        raise QueryError(f"realm {realm!r} does not exist (it has never been indexed)")
    check_embedding(realm, registered, (embedder.model, embedder.dim, embedder.convention))
    if not space_found:
        raise QueryError(retrieval.unindexed_space(realm, space))


def embed_all(embedder: Embedder, texts: list[str]) -> dict[str, np.ndarray]:
    """Each distinct text → its query vector (float32, shape ``(embedder.dim,)``), in one embedder call,
    or none when there is no text. Raises :class:`SchemaMismatchError` for a vector of another width."""
    unique = list(dict.fromkeys(texts))
    out: dict[str, np.ndarray] = {}
    if not unique:
        return out  # no vector read: the embedder is not called
    for text, raw in zip(unique, embedder.embed(unique, "query")):
        vec = np.asarray(raw, dtype=np.float32)
        if vec.shape != (embedder.dim,):
            raise SchemaMismatchError(f"embedding model {embedder.model}", embedder.dim, int(vec.shape[0]))
        out[text] = vec
    return out


@dataclass
class Found:
    """What one probe's reads returned, by evidence kind; ``lists`` holds each relation channel's ranked
    list before fusion, ``channels`` how many candidates each consulted source returned."""

    entities: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    relations: list[dict[str, Any]] = field(default_factory=list)
    communities: list[dict[str, Any]] = field(default_factory=list)
    channels: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    lists: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seeds: dict[int, float] = field(default_factory=dict)
    walk: walked.WalkEvidence | None = None
    searched: Found | None = None


def walks(p: QueryParam) -> bool:
    """Whether ``p`` ranks the graph's evidence by personalised PageRank (an entity mode with
    ``graph_ranking = "ppr"``)."""
    return p.graph_ranking == "ppr" and "entities" in EVIDENCE[p.mode]


_ANCHORED = frozenset({"entities", "mentions", "traversal"})
"""Evidence read from the matched entities (seeds → traversal, mention expansion); every other
source of :data:`EVIDENCE` is independent of them and may run beside them."""

_side_pool: ThreadPoolExecutor | None = None
_side_lock = threading.Lock()


def _side_executor() -> ThreadPoolExecutor:
    global _side_pool
    with _side_lock:
        if _side_pool is None:
            _side_pool = ThreadPoolExecutor(
                max_workers=db.read_pool_settings()[0] // 2, thread_name_prefix="pgrag-read"
            )
        return _side_pool


class _Beside:
    """Runs reads beside the query's own connection ``conn``: each :meth:`submit` hands one call to a
    spare pooled connection, in a worker thread, inside ``conn``'s transaction snapshot
    (``pg_export_snapshot`` / ``SET TRANSACTION SNAPSHOT``, so every read sees the same state); when no
    spare is left the call runs at once on ``conn``. ``wait`` joins what was handed out."""

    def __init__(self, conn: psycopg.Connection, spares: list[psycopg.Connection]) -> None:
        self.conn, self.spares = conn, list(spares)
        self.futures: list[Future[Any]] = []
        self.snapshot = str(conn.execute("SELECT pg_export_snapshot()").fetchone()[0]) if spares else ""  # type: ignore[index]

    def submit(self, fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
        """Start ``fn(connection, *args)``; returns a getter of its result (re-raising its error)."""
        if not self.spares:
            value = fn(self.conn, *args)
            return lambda: value
        future = _side_executor().submit(_in_snapshot, self.spares.pop(), self.snapshot, fn, *args)
        self.futures.append(future)
        return future.result

    def wait(self) -> None:
        wait(self.futures)  # the snapshot must outlive its importers


def _in_snapshot(conn: psycopg.Connection, snapshot: str, fn: Callable[..., Any], *args: Any) -> Any:
    with conn.transaction():
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
        return fn(conn, *args)


def retrieve_all(
    conn: psycopg.Connection,
    dsn: str,
    realm: str,
    p: QueryParam,
    probes: list[Probe],
    vecs: dict[str, np.ndarray],
) -> list[Found]:
    """Consult exactly the evidence of ``EVIDENCE[p.mode]`` for each probe, in one snapshot.

    Where the mode has both, the independent reads run on a spare pooled connection beside the seeds →
    traversal chain (:class:`_Beside`). One spare, not more: on a 2-core machine a third backend (e.g.
    walking half the seeds beside) only competes for the same cores (measured: no gain).
    """
    ev = EVIDENCE[p.mode]
    spares = 1 if ev & _ANCHORED and ev - _ANCHORED else 0
    with conn.transaction(), db.spare_read_connections(dsn, spares) as spare_conns:
        beside = _Beside(conn, spare_conns)
        try:
            independent = beside.submit(_independent_all, realm, p, probes, vecs)
            anchored = [_anchored(conn, dsn, realm, p, probe, vecs) for probe in probes]
        finally:
            beside.wait()  # an error of the anchored reads, if any, wins
        out = []
        for a, i in zip(anchored, independent()):
            if a.searched is not None:  # under the walk, chunk search ran on this connection
                i.chunks = a.searched.chunks
                i.channels.update(a.searched.channels)
                i.warnings += a.searched.warnings
            out.append(
                _walked(conn, realm, p, a, i) if a.walk is not None else _combine(conn, realm, p, a, i)
            )
        return out


def _independent_all(
    conn: psycopg.Connection, realm: str, p: QueryParam, probes: list[Probe], vecs: dict[str, np.ndarray]
) -> list[Found]:
    return [_independent(conn, realm, p, probe, vecs) for probe in probes]


def _anchored(
    conn: psycopg.Connection,
    dsn: str,
    realm: str,
    p: QueryParam,
    probe: Probe,
    vecs: dict[str, np.ndarray],
    *,
    link: bool = True,
) -> Found:
    """Under the graph ranking (:func:`walks`, ``link``): the question's names linked to entities
    (:func:`~pgrag_dag.query.walked.link_seeds`), chunk search (whose top chunks are the walk's dense prior),
    then the walk itself (:func:`~pgrag_dag.query.walked.walk_evidence`) — all on this connection, while the
    relation channels run beside it. When no name links, or no linked entity is a vertex of the graph read,
    or otherwise: entity seeds by vector, then mention expansion (over-fetched: the vector chunks are
    excluded later) and traversal (§7.2)."""
    ev, temporal, out = EVIDENCE[p.mode], p.temporal, Found()
    if link and walks(p):
        linked = walked.link_seeds(conn, realm, p, probe.text)
        searched, ranked = Found(), None
        if linked:
            prior, fulltext = _walk_inputs(conn, realm, p, probe, vecs, searched)
            ranked = walked.walk_evidence(conn, dsn, realm, p, linked, prior, fulltext)
        if ranked is None and "chunks" in ev:  # the dense path answers (HippoRAG's fallback)
            searched.channels.clear()
            _chunks(conn, realm, p, probe, vecs, searched)
        out = (
            Found(seeds=linked, walk=ranked)
            if ranked is not None
            else _anchored(conn, dsn, realm, p, probe, vecs, link=False)
        )
        if linked and ranked is None:
            edges = ", ".join(p.ppr_edges)
            searched.warnings.append(
                f"the question's names link {len(linked)} entit{'y' if len(linked) == 1 else 'ies'} of space "
                f"{p.space!r}, none of them a vertex of the walk graph (ppr_edges: {edges}): answered by the "
                "vector-seeded path"
            )
        out.searched = searched
        out.channels["ppr_seeds"] = len(linked)
        return out
    if "entities" in ev:
        seeds = retrieval.entity_search(
            conn, realm, p.space, vecs[probe.entity_text], p.top_k, temporal=temporal
        )
        out.entities = [_entity(row) for row in seeds]
        out.channels["entities"] = len(seeds)
    seed_ids = [e["id"] for e in out.entities]
    if "mentions" in ev:
        mentioned = retrieval.mention_chunks(
            conn, realm, p.space, seed_ids, 2 * p.chunk_top_k, temporal=temporal
        )
        out.chunks = [
            {**row, "via": "mention", "ranks": {}, "rrf_score": None, "score": None} for row in mentioned
        ]
    if "traversal" in ev and "traversal" in p.relation_channels:
        out.lists["traversal"] = retrieval.traverse(
            conn,
            realm,
            p.space,
            seed_ids,
            max_hops=p.max_hops,
            max_relation_edges=p.max_relation_edges,
            temporal=temporal,
            relation_types=p.relation_types,
        )
    return out


def _independent(
    conn: psycopg.Connection, realm: str, p: QueryParam, probe: Probe, vecs: dict[str, np.ndarray]
) -> Found:
    """Chunk search, the similarity, lexical and ranked relation channels, communities (§7.1–7.3)."""
    ev, temporal, types, space, out = EVIDENCE[p.mode], p.temporal, p.relation_types, p.space, Found()
    if "chunks" in ev and not walks(p):  # under the walk, chunk search runs beside the seeds (_anchored)
        _chunks(conn, realm, p, probe, vecs, out)
    if "similarity" in ev and "similarity" in p.relation_channels:
        out.lists["similarity"] = channels.relation_similarity(
            conn, realm, space, vecs[probe.text], p.relation_top_k, temporal=temporal, relation_types=types
        )
    if "lexical" in ev and "lexical" in p.relation_channels:
        out.lists["lexical"] = channels.relation_fulltext(
            conn, realm, space, probe.fulltext, p.relation_top_k, temporal=temporal, relation_types=types
        )
    if "ranked" in ev:
        ranked = channels.relation_similarity(
            conn,
            realm,
            space,
            vecs[probe.global_text],
            p.relation_top_k,
            temporal=temporal,
            relation_types=types,
        )
        if not ranked:  # no relation embedding: keyword overlap, then corroboration weight (§7.2)
            terms = [*probe.keywords.high_level, *probe.keywords.low_level] or probe.text.split()
            ranked = channels.relation_keyword_overlap(
                conn, realm, space, terms, p.relation_top_k, temporal=temporal, relation_types=types
            )
        out.lists["ranked"] = ranked
    if "communities" in ev:
        _communities(conn, realm, p, vecs[probe.global_text], out)
    return out


def _walk_inputs(
    conn: psycopg.Connection,
    realm: str,
    p: QueryParam,
    probe: Probe,
    vecs: dict[str, np.ndarray],
    out: Found,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The chunk searches the walk takes in: its dense prior (``id, distance, score`` of the
    ``max(chunk_top_k, ppr_prior_k)`` nearest chunks, no text: only the walk's own top chunks are read in
    full) and the full-text channel's rows (``None`` when not asked for), both empty when the mode has no
    chunk evidence; their counts go to ``out.channels``."""
    prior: list[dict[str, Any]] = []
    fulltext: list[dict[str, Any]] | None = None
    if "chunks" not in EVIDENCE[p.mode]:
        return prior, fulltext
    if "vector" in p.chunk_channels:
        depth = max(p.chunk_top_k, p.ppr_prior_k, 3 * p.chunk_top_k if p.collapse_duplicates else 0)
        prior = retrieval.chunk_search(
            conn, realm, p.space, vecs[probe.text], depth, temporal=p.temporal, scores_only=True
        )
        out.channels["chunks_vector"] = len(prior)
    if "fulltext" in p.chunk_channels:
        fulltext = _chunk_fulltext(conn, realm, p, probe)
        out.channels["chunks_fulltext"] = len(fulltext)
    return prior, fulltext


def _chunk_fulltext(
    conn: psycopg.Connection, realm: str, p: QueryParam, probe: Probe
) -> list[dict[str, Any]]:
    """The full-text chunk channel: up to ``chunk_top_k`` chunks best matching :attr:`Probe.fulltext`."""
    return retrieval.chunk_fulltext(conn, realm, p.space, probe.fulltext, p.chunk_top_k, temporal=p.temporal)


def _chunks(
    conn: psycopg.Connection,
    realm: str,
    p: QueryParam,
    probe: Probe,
    vecs: dict[str, np.ndarray],
    out: Found,
) -> None:
    """Chunk search: each of ``p.chunk_channels`` returns up to ``chunk_top_k`` chunks — the vector channel
    nearest the question's vector, the full-text one best matching :attr:`Probe.fulltext` — fused by RRF
    keyed by chunk id and cut to ``chunk_top_k`` (§7.3 applied to chunks). One channel keeps its order."""
    lists: dict[str, list[dict[str, Any]]] = {}
    if "vector" in p.chunk_channels:
        depth = 3 * p.chunk_top_k if p.collapse_duplicates else p.chunk_top_k
        lists["vector"] = retrieval.chunk_search(
            conn, realm, p.space, vecs[probe.text], depth, temporal=p.temporal
        )
    if "fulltext" in p.chunk_channels:
        lists["fulltext"] = _chunk_fulltext(conn, realm, p, probe)
    cosine = {row["id"]: row["score"] for row in lists.get("vector", [])}
    fused = fuse.rrf(lists, k=p.rrf_k, key=_by_id)
    if p.collapse_duplicates:
        vectors = walk_graph.chunk_vectors(conn, realm, [r["id"] for r in fused], temporal=p.temporal)
        fused = fuse.collapse_duplicates(fused, vectors, threshold=p.duplicate_similarity)
    fused = fused[: p.chunk_top_k]
    out.chunks = [
        {
            **row,
            "via": "+".join(c for c in CHUNK_CHANNELS if c in row["ranks"]),
            "rrf_score": row["score"],
            "score": cosine.get(row["id"]),
            "mentions": None,
        }
        for row in fused
    ]
    out.channels["chunks"] = len(out.chunks)
    out.channels.update({f"chunks_{name}": len(rows) for name, rows in lists.items()})


def _by_id(row: dict[str, Any]) -> Any:
    return row["id"]


def _walked(
    conn: psycopg.Connection, realm: str, p: QueryParam, anchored: Found, independent: Found
) -> Found:
    """One probe's evidence as the walk ranked it (``anchored.walk``), its relations fused with the other
    relation channels as in :func:`_combine`."""
    ev = anchored.walk
    assert ev is not None
    out = Found(
        entities=[_entity(e) for e in ev.entities],
        chunks=ev.chunks,
        communities=independent.communities,
        warnings=independent.warnings,
    )
    out.channels = {**anchored.channels, **independent.channels, **ev.channels, "entities": len(ev.entities)}
    out.channels["chunks"] = len(ev.chunks)
    lists = {
        name: rows
        for name in ("similarity", "lexical", "ranked")
        for rows in [independent.lists.get(name)]
        if rows is not None
    }
    if ev.traversal is not None:
        lists = {"traversal": ev.traversal, **lists}
    out.channels.update({name: len(rows) for name, rows in lists.items()})
    out.relations = _fuse(conn, realm, p, lists, ev.seeds)
    return out


def _combine(
    conn: psycopg.Connection, realm: str, p: QueryParam, anchored: Found, independent: Found
) -> Found:
    """One probe's evidence: searched chunks then up to ``chunk_top_k`` mention chunks not among them;
    the relation channels fused (§7.3–7.4)."""
    # a searched chunk's collapsed near-duplicates stay collapsed: not brought back by mention expansion
    searched_ids = {c["id"] for c in independent.chunks} | {
        d["id"] for c in independent.chunks for d in c.get("duplicates", [])
    }
    mentioned = [c for c in anchored.chunks if c["id"] not in searched_ids][: p.chunk_top_k]
    out = Found(
        entities=anchored.entities,
        chunks=independent.chunks + mentioned,
        communities=independent.communities,
        warnings=independent.warnings,
    )
    out.channels = {**anchored.channels, **independent.channels}
    if "mentions" in EVIDENCE[p.mode]:
        out.channels["mentions"] = len(mentioned)
    lists = {
        name: rows
        for name in ("traversal", "similarity", "lexical", "ranked")
        for rows in [anchored.lists.get(name, independent.lists.get(name))]
        if rows is not None
    }
    out.channels.update({name: len(rows) for name, rows in lists.items()})
    out.relations = _fuse(conn, realm, p, lists, [e["id"] for e in out.entities])
    return out


def _fuse(
    conn: psycopg.Connection,
    realm: str,
    p: QueryParam,
    lists: dict[str, list[dict[str, Any]]],
    seed_ids: list[int],
) -> list[dict[str, Any]]:
    """Fuse the relation channels (§7.3), then the optional diversification (§7.4)."""
    if not lists:
        return []
    fused = fuse.rrf(lists, k=p.rrf_k) if p.fusion == "rrf" else fuse.quota(lists, share=p.quota_share)
    if p.mmr and len(fused) > 1:
        fused = fuse.mmr(
            fused, channels.relation_embeddings(conn, realm, [r["id"] for r in fused]), lam=p.mmr_lambda
        )
    if p.node_distance_rerank and seed_ids:
        ends = {e for r in fused if "traversal" not in r["ranks"] for e in (r["source_id"], r["target_id"])}
        distances = channels.entity_distances(
            conn,
            realm,
            p.space,
            seed_ids,
            ends,
            max_depth=p.max_hops + 1,
            temporal=p.temporal,
            relation_types=p.relation_types,
        )
        fused = fuse.node_distance_rerank(
            [{**r, "subject_id": r["source_id"], "object_id": r["target_id"]} for r in fused], distances
        )
    return [_relation(row) for row in fused]


def _communities(conn: psycopg.Connection, realm: str, p: QueryParam, qvec: np.ndarray, out: Found) -> None:
    """Community reports by the similarity/rating/size blend; a staleness warning (§6, §7.1)."""
    found = channels.community_search(conn, realm, p.space, qvec, p.community_top_k * 3, temporal=p.temporal)
    out.channels["communities"] = len(found)
    out.communities = fuse.rank_communities(
        found,
        k=p.community_top_k,
        w_similarity=p.community_w_similarity,
        w_rating=p.community_w_rating,
        w_size=p.community_w_size,
    )
    if not out.communities:
        out.warnings.append(f"no community report in space {p.space!r}: relations are ranked instead")
        return
    spaces = sorted({c["space"] for c in out.communities})
    written = channels.last_graph_write(conn, realm, spaces)
    checked = channels.communities_checked(conn, realm, spaces)
    for space in spaces:
        oldest = min(c["built_at"] for c in out.communities if c["space"] == space)
        # a communities run that found the graph as its reports were built from brings them up to date too
        current_at = max(oldest, checked.get(space, oldest))
        if space in written and current_at < written[space]:
            out.warnings.append(
                f"community reports of space {space!r} are stale: the oldest was built {oldest.isoformat()}, "
                f"the graph was last written {written[space].isoformat()}; rebuild the communities "
                f"(pgrag index {realm}.{space}, or the communities asset in Dagster)"
            )


def _entity(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: row[k] for k in ("id", "space", "name", "entity_type", "description", "score")}
    if "seed" in row:
        out["seed"] = row["seed"]
    return out


def _relation(row: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "id",
        "space",
        "subject",
        "predicate",
        "object",
        "description",
        "negated",
        "valid_from",
        "valid_to",
        "weight",
        "confidence",
        "t_created",
        "t_expired",
        "superseded_by",
    )
    out = {k: row[k] for k in keys}
    out.update(
        subject_id=row["source_id"],
        object_id=row["target_id"],
        superseded=bool(row["superseded"]),
        hop=row["hop"],
        channel=row["channel"],
        ranks=dict(row["ranks"]),
        score=row["score"],
    )
    if row.get("hop_resolved"):
        out["hop_resolved"] = True
    if "ppr_score" in row:
        out["ppr_score"] = row["ppr_score"]
    return out


def merge_found(found: list[Found], result: QueryResult) -> None:
    """One probe's evidence as is; several (decomposed) interleaved round-robin, de-duplicated."""
    result.entities = fuse.interleave([f.entities for f in found], _by_id)
    # one probe's fused relations are already distinct triples
    result.relations = (
        found[0].relations
        if len(found) == 1
        else fuse.interleave([f.relations for f in found], fuse.triple_key)
    )
    result.communities = fuse.interleave([f.communities for f in found], _by_id)
    searched = fuse.interleave([[c for c in f.chunks if c["via"] != "mention"] for f in found], _by_id)
    seen = {c["id"] for c in searched}
    mention = [
        c
        for c in fuse.interleave([[c for c in f.chunks if c["via"] == "mention"] for f in found], _by_id)
        if c["id"] not in seen
    ]
    result.chunks = [{**c, "rank": rank, "ref": rank} for rank, c in enumerate(searched + mention, 1)]
    for rows in (result.entities, result.relations, result.communities):
        for rank, row in enumerate(rows, 1):
            row["rank"] = rank
    for f in found:
        for name, n in f.channels.items():
            result.channels[name] = result.channels.get(name, 0) + n
        result.warnings += [w for w in f.warnings if w not in result.warnings]
    for warning in result.warnings:
        logger.warning("query: %s", warning)
