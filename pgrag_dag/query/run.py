"""The query path: modes, conditioning, retrieval, fusion, assembly and synthesis (paper §7, §8.3).

:func:`query_data` retrieves and assembles; :func:`query` adds one synthesis call through the
injected :class:`~pgrag_dag.providers.llm.ModelClient`. The six modes of Table 3 consult exactly the
evidence of :data:`EVIDENCE`:

========  ========  ==============================  ================================  ===========
mode      entities  chunks                          relations                         communities
========  ========  ==============================  ================================  ===========
mix       ✓         vector (+ fulltext) + mentions  traversal + similarity + lexical  —
local     ✓         vector (+ fulltext) + mentions  traversal + similarity + lexical  —
global    —         —                               ranked                            ✓
hybrid    ✓         vector (+ fulltext) + mentions  traversal + similarity + lexical  ✓
                                                    + ranked
naive     —         vector (+ fulltext)             —                                 —
bypass    —         —                               —                                 —
========  ========  ==============================  ================================  ===========

"chunks" is chunk search by the ``chunk_channels`` — ``vector`` (HNSW over chunk embeddings, the
default) and ``fulltext`` (PostgreSQL full-text over title and text, off by default; the measurement
behind that default is in ``evaluation/README.md``), fused by RRF keyed by chunk id and cut to
``chunk_top_k`` — plus mention expansion wherever entities are matched. An unknown mode raises
:class:`QueryError` — a query never silently runs in another mode (§7.1).

In the entity modes (mix, local, hybrid) the default ``graph_ranking = "ppr"`` replaces the vector entity
seeds, mention expansion and k-hop traversal of the table by one personalised-PageRank walk
(:mod:`pgrag_dag.query.ppr`, :mod:`pgrag_dag.query.walked`): restart on the question's own names linked to
entities and on the dense top chunks; its mass ranks the chunks, entities and the relations that take the
traversal channel's place in the fusion. A question naming no indexed entity takes the table's path.

Conditioning (§7.2, :mod:`pgrag_dag.query.keywords`): low-level keywords are appended to the question for
the entity query vector; high-level keywords to it for the global vector (``ranked`` relations and
communities); the low-level ones (else the high-level ones, else the question's words) form the
full-text query of relations and chunks — naive mode extracts keywords only for the latter. Relations arrive
by up to four channels (:mod:`pgrag_dag.store.retrieval`, :mod:`pgrag_dag.store.retrieval_channels`) —
traversal up to ``max_hops``, similarity over relation embeddings, full-text over the rendered relation, and
the global ranking (relation similarity to the global vector, or keyword overlap then weight when no
relation is embedded) — and are fused by RRF or the fixed-share quota (:mod:`pgrag_dag.query.fusion`).
Every relation read applies the temporal predicates and ``relation_types`` inside the read — within
each traversal step, never to the walk's result.

Assembly (:mod:`pgrag_dag.query.assembly`): community reports, passages, entities, relations; no cap by
default; the assembly report (characters retrieved vs placed per block) is returned and logged.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from datetime import datetime

import psycopg

from pgrag_dag.config.sections import TelemetrySettings
from pgrag_dag.errors import QueryError
from pgrag_dag.names import validate_realm
from pgrag_dag.pipeline.embeddings import query_warnings
from pgrag_dag.providers.embedding import Embedder
from pgrag_dag.providers.llm import ModelClient
from pgrag_dag.providers.prompts import SYNTHESIS_SYSTEM, SYNTHESIS_USER
from pgrag_dag.query import keywords as kw
from pgrag_dag.query.assembly import assemble, summary
from pgrag_dag.query.filter_warnings import filter_warnings
from pgrag_dag.query.retrieve import Probe, check_scope, embed_all, merge_found, retrieve_all
from pgrag_dag.query_param import (
    QueryParam,
    QueryResult,
    check_mode,
)
from pgrag_dag.store import db
from pgrag_dag.store.vectors import unembedded

logger = logging.getLogger(__name__)


def query_data(
    question: str,
    param: QueryParam,
    *,
    dsn: str,
    realm: str,
    embedder: Embedder,
    client: ModelClient | None = None,
    telemetry: TelemetrySettings | None = None,
) -> QueryResult:
    """Retrieve evidence for ``question`` from ``realm`` and assemble the context (§7.1–7.5).

    Keywords come from ``client`` only when ``param.keywords == "model"`` (else no model call).
    The question, and the keyword-conditioned entity and global texts, are embedded in one
    ``embedder`` call (float32 vectors of the realm's width), or none when no vector read runs (naive
    mode with only the full-text chunk channel). No connection is held while a model
    or the embedder is called: the realm and space are checked on a pooled connection given back at
    once, then keywords and vectors are computed, then every read sees one snapshot: a read-only
    repeatable-read transaction on a pooled connection (:func:`~pgrag_dag.store.db.read_connection`);
    where a mode has both, the entity-anchored reads (seeds → mention expansion, traversal) run on it
    while the independent ones (chunk search, relation similarity and full-text, ranked relations,
    communities) run on a spare pooled connection importing the same snapshot, or inline when none is
    free. Returns a :class:`QueryResult`; the assembly report and any warning are logged — among them,
    how many chunks, entities and relations of the space no vector search can find (no vector yet, or
    only a fallback vector: :func:`~pgrag_dag.pipeline.embeddings.query_warnings`), and filters that cannot
    match (:func:`~pgrag_dag.query.filter_warnings.filter_warnings`).

    With ``telemetry.coverage`` on (:class:`~pgrag_dag.config.TelemetrySettings`; off when ``None``), a
    query that retrieved (any mode but bypass) queues one coverage event — the question's SHA-256, never
    its text; the entity and community ids returned — for a background writer
    (:func:`pgrag_dag.query.telemetry.record_query`, §6.1): it never blocks, and its failures never fail the
    query.

    Raises:
        QueryError: an empty question, a realm or space that does not exist, or a read that ran past
            the read timeout (:func:`~pgrag_dag.store.db.read_pool_settings`).
        SchemaMismatchError: ``embedder`` is not the model or width the realm was indexed with (§3.5).
        ModelError: the embedder failed within its deadline (a litellm embedder names its model).
        DatabaseError: PostgreSQL is unreachable or went away during the query (one line naming the
            server), or refused a read — never a raw psycopg error.
        InvalidNameError: an invalid realm name.
    """
    check_mode(param.mode)
    validate_realm(realm)
    if not isinstance(question, str) or not question.strip():
        raise QueryError("the question is empty")
    result = QueryResult(question=question, param=param)
    if param.mode != "bypass":
        with _read_errors(dsn):
            with db.read_connection(dsn) as conn:
                check_scope(conn, realm, param.space, embedder)
                result.warnings += query_warnings(
                    unembedded(conn, realm, param.space), param.space, embedder.model
                )
                result.warnings += filter_warnings(conn, realm, param)
        parts = (kw.decompose(question) if param.decompose else []) or [question]
        result.subqueries = parts if len(parts) > 1 else []
        probes = [Probe.conditioned(text, param, client) for text in parts]
        result.keywords = {
            "low_level": list(dict.fromkeys(w for p in probes for w in p.keywords.low_level)),
            "high_level": list(dict.fromkeys(w for p in probes for w in p.keywords.high_level)),
            "source": probes[0].keywords.source,
        }
        if param.keywords == "model" and any(p.keywords.source == "lexical" for p in probes):
            result.warnings.append(
                "model keywords were asked for but "
                + ("no model client was given" if client is None else "the model call failed (see the log)")
                + ": lexical keywords were used"
            )
        vectors = embed_all(embedder, [t for p in probes for t in p.texts(param)])
        with _read_errors(dsn):
            with db.read_connection(dsn) as conn:
                found = retrieve_all(conn, dsn, realm, param, probes, vectors)
        merge_found(found, result)
    _assemble(result)
    if telemetry is not None and telemetry.coverage:
        from pgrag_dag.query.telemetry import record_query

        record_query(result, dsn=dsn, realm=realm, telemetry=telemetry)
    return result


@contextlib.contextmanager
def _read_errors(dsn: str) -> Iterator[None]:
    """A read past the statement timeout becomes :class:`QueryError`; any other psycopg error a
    :class:`DatabaseError` naming the server (:func:`~pgrag_dag.store.db.database_errors`): a query
    never leaks a raw driver error."""
    with db.database_errors(dsn):
        try:
            yield
        except psycopg.errors.QueryCanceled as exc:
            raise QueryError(
                f"a read ran past the read timeout ({db.read_pool_settings()[1]:g} s, "
                "PGRAG_READ_TIMEOUT_S); lower max_hops or max_relation_edges"
            ) from exc


def query(
    question: str,
    param: QueryParam,
    *,
    dsn: str,
    realm: str,
    embedder: Embedder,
    client: ModelClient,
    telemetry: TelemetrySettings | None = None,
    on_text: Callable[[str], None] | None = None,
) -> tuple[str, QueryResult]:
    """Answer ``question``: :func:`query_data` (keywords from ``client`` when
    ``param.keywords == "model"``), then one synthesis call (§7.5).

    The model receives :data:`~pgrag_dag.providers.prompts.SYNTHESIS_SYSTEM` and
    :data:`~pgrag_dag.providers.prompts.SYNTHESIS_USER` filled with the question and the assembled context,
    through ``client.complete(..., purpose="synthesis", json_mode=False)``. Returns
    ``(answer text, QueryResult)``.

    ``telemetry``: as for :func:`query_data` (the event is queued before synthesis). ``on_text``: stream the
    answer's pieces as they arrive (a cached or replayed answer whole, once; :meth:`ModelClient.complete`).

    Raises: as :func:`query_data`, plus :class:`ModelError` / :class:`ReplayMissError` from synthesis.
    """
    result = query_data(
        question, param, dsn=dsn, realm=realm, embedder=embedder, client=client, telemetry=telemetry
    )
    return synthesise(question, result, param, client, on_text=on_text), result


def synthesise(
    question: str,
    result: QueryResult,
    param: QueryParam,
    client: ModelClient,
    *,
    on_text: Callable[[str], None] | None = None,
) -> str:
    """The answer to ``question`` from ``result`` (what :func:`query_data` retrieved for ``param``): one
    synthesis call (§7.5) with :func:`synthesis_messages`, streamed to ``on_text`` when given. Raises
    :class:`ModelError` / :class:`ReplayMissError` from the model client; with no model answer (offline, a
    question never recorded), :func:`~pgrag_dag.query.extractive.extractive_answer` of the same ``result``
    shows the sentences closest to the question instead, as ``pgrag query`` does."""
    return client.complete(
        synthesis_messages(question, result.context, param),
        purpose="synthesis",
        json_mode=False,
        on_text=on_text,
    ).text


def synthesis_messages(question: str, context: str, param: QueryParam | None = None) -> list[dict[str, str]]:
    """The chat messages of the synthesis call (OpenAI format); a valid-time or belief-time filter is
    stated to the model beside the question, so it answers for that date. A valid-time date is stated
    as given; belief time (§5.3) only as "an earlier belief-time instant", not its value: the instant is
    this database's clock, which says nothing about the documents (the context is already the graph as
    believed then), and stating it would make every belief-time prompt unique to one database, so no
    cached or recorded response could ever serve it (issue 14)."""
    when = []
    if param is not None and param.as_of:
        when.append(f"as of {param.as_of} (valid time)")
    if param is not None and isinstance(param.as_believed_at, datetime):
        when.append("as the graph stood at an earlier belief-time instant")
    asked = question + (f"\n(Answer {' and '.join(when)}.)" if when else "")
    return [
        {"role": "system", "content": SYNTHESIS_SYSTEM},
        {"role": "user", "content": SYNTHESIS_USER.format(question=asked, context=context)},
    ]


def _assemble(result: QueryResult) -> None:
    """Build ``result.context`` and ``result.assembly`` (§7.5, §8.3) and log the report."""
    p = result.param
    chunk_keys = (
        "id",
        "space",
        "doc_key",
        "title",
        "chunk_index",
        "text",
        "t_created",
        "via",
        "ranks",
        "rrf_score",
        "score",
        "mentions",
        "rank",
        "ref",
    )
    optional = ("ppr_score", "duplicates")  # the walk's mass; near-duplicates collapsed into the chunk
    result.chunks = [
        {k: c[k] for k in chunk_keys} | {k: c[k] for k in optional if k in c} for c in result.chunks
    ]
    built = assemble(
        communities=result.communities,
        chunks=result.chunks,
        entities=result.entities,
        relations=result.relations,
        caps=p.caps,
        validity=p.render_relation_validity,
    )
    believed = p.as_believed_at.isoformat() if isinstance(p.as_believed_at, datetime) else p.as_believed_at
    report = built.report
    report["filters"] = {
        "as_of": p.as_of,
        "as_believed_at": believed,
        "include_superseded": p.include_superseded,
        "relation_types": list(p.relation_types) if p.relation_types is not None else None,
    }
    result.context, result.assembly = built.context, report
    logger.info(
        "query assembly mode=%s space=%s as_of=%s as_believed_at=%s include_superseded=%s keywords=%s %s "
        "channels=%s",
        p.mode,
        p.space,
        p.as_of or "-",
        believed or "-",
        p.include_superseded,
        result.keywords.get("source", "-"),
        summary(report),
        ",".join(f"{k}:{v}" for k, v in result.channels.items()) or "-",
    )


__all__ = ["query", "query_data", "synthesis_messages", "synthesise"]
