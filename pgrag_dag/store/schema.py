"""DDL for the control schema and one schema per realm (paper Table 1, §3.2–3.5).

Initialisation is idempotent and safe when several processes run it at once (a transaction-level
advisory lock serialises it), and fails closed: every embedding column must exist with the realm's
configured width, and a realm registered under one embedding model refuses another.

DDL runs once per realm and :data:`SCHEMA_VERSION`: the realm registry records the version a realm's
schema was built at, and :func:`init_realm` only reads the registry and the catalog when it is current
— no ``ALTER``/``CREATE INDEX`` (which take ``ACCESS EXCLUSIVE``/``SHARE`` locks and would queue behind,
and deadlock with, live queries) on a routine run. Bump :data:`SCHEMA_VERSION` with every DDL change.

Lock order (issue 11). Queries only read (``ACCESS SHARE``, in one repeatable-read snapshot) and never
conflict with routine writes. Every writing stage takes, in this order: the stage lock of its partition (a
session-level advisory lock held for the stage, :func:`pgrag_dag.store.locks.stage_lock`), then in its write
transaction the partition's transaction-level advisory lock (:func:`pgrag_dag.store.locks.lock_partition`),
then row locks on its own space's rows, table by table in the order documents → raw_extractions →
gate_decisions → resolution_rejections → entities → entity_keys → doc_mentions → relations → communities →
community_members → community_sources → community_children → stage_pending (the relations stage's quality
measurement stores, last, the keys of entities written without them — under the partition lock, so no writer
of the space waits on it). Two spaces of one realm share tables but never rows (every key carries
``space``), so their writers do not wait on each other. ``pgrag reembed`` (:mod:`pgrag_dag.operate.reembed`)
takes the stage locks of every space of the realm (in sorted space order, held for the whole command), then
in its one write transaction the schema lock (:func:`lock_ddl`), the partition locks of every space
(sorted), the registry row and the four embedded tables (``ACCESS EXCLUSIVE``: queries of the realm wait for
its commit).

Realm schema ``pgrag_<realm>`` tables (every one carries ``space``):

- ``documents``  chunk vertices: doc_key (any length: unique per space and chunk_index through the
  index ``documents_space_key_chunk`` on ``md5(doc_key)``), chunk_index, title, source, doc_order, text,
  content_hash, metadata (with the chunk's ``char_start``/``char_end``), full-text ``search_tsv`` =
  ``to_tsvector('english', title || ' ' || text)`` (GIN index ``documents_fts_tsv``), embedding vector(d)
- ``raw_extractions``  staging: model text and parsed JSON per (chunk, pass)
- ``gate_decisions``   staging: every extracted entity/triple, accepted or rejected with its gate
- ``resolution_rejections``  staging: triples refused only after resolution (self-loops)
- ``entities``   canonical name, type, description, aliases, resolved_type / resolved_description (what
  resolution decided where an enricher stored another value, else null), dormant_since, merged_into (the
  vertex a fragment was merged into, schema version 21; a merged row is history, never resolved to),
  embedding vector(d)
- ``relations``  subject→object edges: predicate, description, chunk_ids (provenance), weight,
  negated, confidence, payload (valid_from/valid_to, promoted to generated columns, and padded for
  comparison as valid_from_key — YYYY → YYYY-01-01 — and valid_to_key — YYYY → YYYY-12-31, YYYY-MM →
  YYYY-MM-31 — which order lexically), superseded_by, t_created/t_expired (belief time, database clock),
  dormant_since, rendered text (full-text through the stored ``rendered_tsv`` column and its GIN index),
  embedding vector(d); the partial index ``relations_superseded_by`` serves the ``superseded_by`` foreign key
  when relations are deleted (schema version 20)
- ``doc_mentions``  chunk → entity
- ``entity_keys``  identity keys of each entity's name and aliases (:mod:`pgrag_dag.store.quality`, schema
  version 15)
- ``communities``   report vertices: level, title, summary, findings, rating, size, built_at,
  graph_fingerprint, parent_id, embedding vector(d)
- ``communities_expired``  reports a rebuild replaced, with ``t_expired`` (schema version 20): what a
  global query ``as_believed_at`` an earlier instant reads
- ``community_members``, ``community_children``
- ``community_sources``  what each level-0 report was built from: (community, relation, chunk) as they were
  when it was built (schema version 20; filled for older realms' reports from their members' relations)
- ``stage_pending``  work a stage owes its space (failed community reports), retried by its next run
- ``source_files``  each text file's size, modification time, inode and hash when last read
  (:mod:`pgrag_dag.store.source_files`, schema version 22): an unchanged file is not read again

Every embedded table also has ``embed_hash`` (SHA-256 of the text its vector embeds), and, for rows the
model refused under ``embedding.fallback: hashing`` (issue 13), ``embed_fallback`` (the fallback
embedder's name) and ``fallback_embedding`` (its vector) — the indexed ``embedding`` column stays
``NULL`` for them, so no vector search ever compares the model's vectors with the fallback's. The
partial indexes ``<table>_unembedded`` (documents, entities, relations) hold the rows without an
``embedding``, which every query counts.
- ``belief_log``, ``relation_belief``, ``entity_belief``, ``documents_removed``: the append-only belief
  history and its triggers (:mod:`pgrag_dag.store.history`, schema version 7; ``belief_log.renamed_from``
  for documents re-keyed in place, schema version 17)
- ``query_events``: coverage telemetry, one row per recorded query (:mod:`pgrag_dag.store.telemetry`)
- ``graph_writes``: one row per transaction that changed a space's graph, appended by triggers on the
  tables the personalised-PageRank walk reads; their count is the space's graph data version
  (:mod:`pgrag_dag.store.graph_version`, schema version 19)
- ``graph_tallies``, ``predicate_tallies``, ``entity_degree``: the graph's counts, its current relations per
  predicate and each entity's current relations, kept by delta by triggers (:mod:`pgrag_dag.store.tallies`,
  schema version 23); ``entity_keys_owed``: the entities whose identity keys are to be stored
  (:mod:`pgrag_dag.store.quality`, schema version 23)
- ``deferred_indexes``: the secondary indexes a first load of vectors dropped and has not built again yet,
  with their definitions (:mod:`pgrag_dag.store.deferred_indexes`, schema version 25); normally empty
- ``community_lineage`` (view): community → the relations it was built from → their chunks → documents
"""

from __future__ import annotations

import logging

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from pgrag_dag.errors import DatabaseError, SchemaMismatchError
from pgrag_dag.names import schema_for, validate_realm
from pgrag_dag.store import (
    communities,
    deferred_indexes,
    graph_version,
    history,
    lineage,
    purge,
    quality,
    source_files,
    tallies,
    telemetry,
    vector_index,
    vectors,
    work_queue,
)
from pgrag_dag.store.db import privileged
from pgrag_dag.store.embedding_columns import (
    EMBEDDED_TABLES,
    check_embedding,
    create_embedding_indexes,
    drop_outdated_indexes,
    verify_embedding_columns,
)

log = logging.getLogger(__name__)

CONTROL_SCHEMA = "pgrag__control"
SCHEMA_VERSION = 26
"""The realm schema's DDL version, recorded per realm in ``pgrag__control.realms.schema_version``."""
_LOCK_KEY = 727_274_001  # advisory lock id for schema initialisation

_CONTROL_DDL = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE SCHEMA IF NOT EXISTS pgrag__control;
CREATE TABLE IF NOT EXISTS pgrag__control.realms (
    realm text PRIMARY KEY,
    embedding_model text NOT NULL,
    embedding_dim integer NOT NULL CHECK (embedding_dim > 0),
    created_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE pgrag__control.realms ADD COLUMN IF NOT EXISTS schema_version integer NOT NULL DEFAULT 0;
ALTER TABLE pgrag__control.realms ADD COLUMN IF NOT EXISTS embedding_convention text NOT NULL DEFAULT
    'symmetric';
CREATE TABLE IF NOT EXISTS pgrag__control.llm_cache (
    key text PRIMARY KEY,
    prompt_key text NOT NULL,
    model text NOT NULL,
    purpose text NOT NULL DEFAULT '',
    request jsonb NOT NULL,
    response text NOT NULL,
    prompt_tokens integer NOT NULL DEFAULT 0,
    completion_tokens integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS llm_cache_prompt_key ON pgrag__control.llm_cache (prompt_key, created_at DESC);
CREATE TABLE IF NOT EXISTS pgrag__control.llm_evicted (
    key text NOT NULL,
    response_sha256 text NOT NULL,
    prompt_key text NOT NULL,
    model text NOT NULL,
    purpose text NOT NULL DEFAULT '',
    evicted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, response_sha256)
);
"""

FULL_TEXT_INDEXES = {
    "documents": (
        "documents_fts_tsv",
        "CREATE INDEX IF NOT EXISTS documents_fts_tsv ON {s}.documents USING gin (search_tsv) "
        "WITH (fastupdate = off)",
    ),
    "relations": (
        "relations_fts_tsv",
        "CREATE INDEX IF NOT EXISTS relations_fts_tsv ON {s}.relations USING gin (rendered_tsv) "
        "WITH (fastupdate = off)",
    ),
}
"""table → (name, DDL) of its full-text GIN index: the lexical channels' (§7.1); ``{s}`` is the realm schema.
A first load drops and rebuilds them with the HNSW indexes (:mod:`pgrag_dag.store.bulk_index`)."""


def create_full_text_indexes(conn: psycopg.Connection, realm: str, tables: tuple[str, ...] = ()) -> None:
    """Create the full-text GIN indexes of :data:`FULL_TEXT_INDEXES` (of ``tables``; all when empty) where
    they are missing, in the caller's transaction."""
    for table, (_, ddl) in FULL_TEXT_INDEXES.items():
        if not tables or table in tables:
            conn.execute(sql.SQL(ddl).format(s=sql.Identifier(schema_for(realm))))


# {s} is the realm schema, {v} the vector type with its width.
_REALM_DDL = (
    """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.documents (
    id bigserial PRIMARY KEY,
    space text NOT NULL,
    doc_key text NOT NULL,
    chunk_index integer NOT NULL,
    title text NOT NULL,
    source text NOT NULL,
    doc_order integer NOT NULL,
    text text NOT NULL,
    content_hash text NOT NULL,
    doc_hash text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{{}}',
    embedding {v},
    embed_hash text,
    t_created timestamptz NOT NULL DEFAULT now()
);
-- a doc_key of any length (issue 13): the unique index holds its MD5, not the key, which could pass the
-- btree's ~2,700-byte limit; lookups by doc_key add md5(doc_key) = md5(%s) to use it
CREATE UNIQUE INDEX IF NOT EXISTS documents_space_key_chunk ON {s}.documents (space, md5(doc_key),
    chunk_index);
ALTER TABLE {s}.documents DROP CONSTRAINT IF EXISTS documents_space_doc_key_chunk_index_key;
ALTER TABLE {s}.documents ADD COLUMN IF NOT EXISTS search_tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('english', title || ' ' || text)) STORED;
"""
    + FULL_TEXT_INDEXES["documents"][1]
    + """;
-- issue 15: what a document's chunks were made from (text, title, source, order, metadata, chunker): an equal
-- fingerprint is not chunked again
ALTER TABLE {s}.documents ADD COLUMN IF NOT EXISTS doc_fingerprint text;
CREATE TABLE IF NOT EXISTS {s}.raw_extractions (
    id bigserial PRIMARY KEY,
    space text NOT NULL,
    chunk_id bigint NOT NULL REFERENCES {s}.documents(id) ON DELETE CASCADE,
    pass integer NOT NULL,
    model text NOT NULL,
    prompt_version text NOT NULL,
    raw_text text,
    parsed jsonb,
    parse_status text NOT NULL CHECK (parse_status IN ('ok', 'parse_error', 'model_error')),
    error text,
    prompt_tokens integer NOT NULL DEFAULT 0,
    completion_tokens integer NOT NULL DEFAULT 0,
    cache_hit boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (chunk_id, pass)
);
CREATE TABLE IF NOT EXISTS {s}.gate_decisions (
    id bigserial PRIMARY KEY,
    space text NOT NULL,
    chunk_id bigint NOT NULL REFERENCES {s}.documents(id) ON DELETE CASCADE,
    pass integer NOT NULL,
    kind text NOT NULL CHECK (kind IN ('entity', 'triple')),
    name text,
    entity_type text,
    description text,
    aliases text[],
    subject text,
    predicate text,
    raw_predicate text,
    object text,
    negated boolean,
    confidence double precision,
    valid_from text,
    valid_to text,
    accepted boolean NOT NULL,
    gate text,
    offending_value text,
    CHECK (accepted = (gate IS NULL))
);
ALTER TABLE {s}.gate_decisions ADD COLUMN IF NOT EXISTS raw_predicate text;
CREATE INDEX IF NOT EXISTS gate_decisions_space ON {s}.gate_decisions (space, accepted);
CREATE TABLE IF NOT EXISTS {s}.resolution_rejections (
    space text NOT NULL,
    chunk_id bigint NOT NULL REFERENCES {s}.documents(id) ON DELETE CASCADE,
    subject text NOT NULL,
    predicate text NOT NULL,
    object text NOT NULL,
    gate text NOT NULL,
    offending_value text NOT NULL
);
CREATE INDEX IF NOT EXISTS resolution_rejections_space ON {s}.resolution_rejections (space);
CREATE TABLE IF NOT EXISTS {s}.entities (
    id bigserial PRIMARY KEY,
    space text NOT NULL,
    name text NOT NULL,
    entity_type text NOT NULL DEFAULT 'Concept',
    description text NOT NULL DEFAULT '',
    aliases text[] NOT NULL DEFAULT '{{}}',
    resolved_type text,
    resolved_description text,
    dormant_since timestamptz,
    embedding {v},
    embed_hash text,
    t_created timestamptz NOT NULL DEFAULT now(),
    t_updated timestamptz NOT NULL DEFAULT now()
);
-- realms created before enrichers: what resolution decided where an enricher stored something else
ALTER TABLE {s}.entities ADD COLUMN IF NOT EXISTS resolved_type text;
ALTER TABLE {s}.entities ADD COLUMN IF NOT EXISTS resolved_description text;
-- a fragment merged into the vertex that gained its canonical name as an alias (§4.6, schema version 21)
ALTER TABLE {s}.entities ADD COLUMN IF NOT EXISTS merged_into bigint REFERENCES {s}.entities(id)
    ON DELETE SET NULL;
CREATE INDEX IF NOT EXISTS entities_merged_into ON {s}.entities (merged_into) WHERE merged_into IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS entities_space_lower_name ON {s}.entities (space, lower(name));
CREATE INDEX IF NOT EXISTS entities_aliases ON {s}.entities USING gin (aliases);
CREATE UNIQUE INDEX IF NOT EXISTS entities_space_id ON {s}.entities (space, id);
CREATE INDEX IF NOT EXISTS entities_dormant ON {s}.entities (space, id) WHERE dormant_since IS NOT NULL;
CREATE TABLE IF NOT EXISTS {s}.relations (
    id bigserial PRIMARY KEY,
    space text NOT NULL,
    source_id bigint NOT NULL REFERENCES {s}.entities(id),
    target_id bigint NOT NULL REFERENCES {s}.entities(id),
    predicate text NOT NULL,
    description text NOT NULL DEFAULT '',
    chunk_ids bigint[] NOT NULL DEFAULT '{{}}',
    weight integer NOT NULL DEFAULT 0,
    negated boolean NOT NULL DEFAULT false,
    confidence double precision NOT NULL DEFAULT 1.0,
    payload jsonb NOT NULL DEFAULT '{{}}',
    valid_from text GENERATED ALWAYS AS (payload ->> 'valid_from') STORED,
    valid_to text GENERATED ALWAYS AS (payload ->> 'valid_to') STORED,
    valid_from_key text GENERATED ALWAYS AS (
        CASE length(payload ->> 'valid_from') WHEN 4 THEN (payload ->> 'valid_from') || '-01-01'
                                              WHEN 7 THEN (payload ->> 'valid_from') || '-01'
                                              ELSE payload ->> 'valid_from' END) STORED,
    valid_to_key text GENERATED ALWAYS AS (
        CASE length(payload ->> 'valid_to') WHEN 4 THEN (payload ->> 'valid_to') || '-12-31'
                                            WHEN 7 THEN (payload ->> 'valid_to') || '-31'
                                            ELSE payload ->> 'valid_to' END) STORED,
    superseded_by bigint REFERENCES {s}.relations(id),
    t_created timestamptz DEFAULT now(),
    t_expired timestamptz,
    dormant_since timestamptz,
    rendered text NOT NULL DEFAULT '',
    embedding {v},
    embed_hash text,
    CHECK (source_id <> target_id),
    UNIQUE (space, source_id, predicate, target_id, negated)
);
ALTER TABLE {s}.relations ADD COLUMN IF NOT EXISTS valid_from_key text GENERATED ALWAYS AS (
    CASE length(payload ->> 'valid_from') WHEN 4 THEN (payload ->> 'valid_from') || '-01-01'
                                          WHEN 7 THEN (payload ->> 'valid_from') || '-01'
                                          ELSE payload ->> 'valid_from' END) STORED;
ALTER TABLE {s}.relations ADD COLUMN IF NOT EXISTS valid_to_key text GENERATED ALWAYS AS (
    CASE length(payload ->> 'valid_to') WHEN 4 THEN (payload ->> 'valid_to') || '-12-31'
                                        WHEN 7 THEN (payload ->> 'valid_to') || '-31'
                                        ELSE payload ->> 'valid_to' END) STORED;
CREATE INDEX IF NOT EXISTS relations_source ON {s}.relations (space, source_id, t_created DESC NULLS LAST,
    id);
CREATE INDEX IF NOT EXISTS relations_target ON {s}.relations (space, target_id, t_created DESC NULLS LAST,
    id);
-- an edge's endpoints lie in its own space, by construction: the walk (§7.2) never needs to look at a
-- neighbour's row
DO $fk$ BEGIN ALTER TABLE {s}.relations ADD CONSTRAINT relations_source_in_space FOREIGN KEY (space,
    source_id) REFERENCES {s}.entities (space, id); EXCEPTION WHEN duplicate_object THEN NULL; END $fk$;
DO $fk$ BEGIN ALTER TABLE {s}.relations ADD CONSTRAINT relations_target_in_space FOREIGN KEY (space,
    target_id) REFERENCES {s}.entities (space, id); EXCEPTION WHEN duplicate_object THEN NULL; END $fk$;
-- the walk over the current graph reads only these covering partial indexes (index-only scans)
CREATE INDEX IF NOT EXISTS relations_walk_out ON {s}.relations (space, source_id, t_created DESC NULLS LAST,
    id)
    INCLUDE (target_id) WHERE dormant_since IS NULL AND superseded_by IS NULL;
CREATE INDEX IF NOT EXISTS relations_walk_in ON {s}.relations (space, target_id, t_created DESC NULLS LAST,
    id)
    INCLUDE (source_id) WHERE dormant_since IS NULL AND superseded_by IS NULL;
CREATE INDEX IF NOT EXISTS relations_validity ON {s}.relations (space, valid_from_key, valid_to_key);
CREATE INDEX IF NOT EXISTS relations_belief ON {s}.relations (space, t_created, t_expired);
-- deleting a relation checks the superseded_by foreign key of every other row: without this index each
-- deleted row scans the table (0.75 s for the 36 relations of one document purged from 100k, issue 28); few
-- rows are superseded, so the partial index stays small
CREATE INDEX IF NOT EXISTS relations_superseded_by ON {s}.relations (superseded_by)
    WHERE superseded_by IS NOT NULL;
ALTER TABLE {s}.relations ADD COLUMN IF NOT EXISTS rendered_tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('english', rendered)) STORED;
DROP INDEX IF EXISTS {s}.relations_fts;
"""
    + FULL_TEXT_INDEXES["relations"][1]
    + """;
CREATE TABLE IF NOT EXISTS {s}.doc_mentions (
    space text NOT NULL,
    chunk_id bigint NOT NULL REFERENCES {s}.documents(id) ON DELETE CASCADE,
    entity_id bigint NOT NULL REFERENCES {s}.entities(id),
    PRIMARY KEY (chunk_id, entity_id)
);
CREATE INDEX IF NOT EXISTS doc_mentions_entity ON {s}.doc_mentions (space, entity_id);
"""
    + communities.COMMUNITY_DDL
    + """-- realms created before stale-embedding tracking gain its column
ALTER TABLE {s}.documents ADD COLUMN IF NOT EXISTS embed_hash text;
ALTER TABLE {s}.entities ADD COLUMN IF NOT EXISTS embed_hash text;
ALTER TABLE {s}.relations ADD COLUMN IF NOT EXISTS embed_hash text;
ALTER TABLE {s}.communities ADD COLUMN IF NOT EXISTS embed_hash text;
-- issue 13: a vector the fallback embedder made (never in the indexed column) and which embedder made it
ALTER TABLE {s}.documents ADD COLUMN IF NOT EXISTS embed_fallback text;
ALTER TABLE {s}.entities ADD COLUMN IF NOT EXISTS embed_fallback text;
ALTER TABLE {s}.relations ADD COLUMN IF NOT EXISTS embed_fallback text;
ALTER TABLE {s}.communities ADD COLUMN IF NOT EXISTS embed_fallback text;
ALTER TABLE {s}.documents ADD COLUMN IF NOT EXISTS fallback_embedding vector;
ALTER TABLE {s}.entities ADD COLUMN IF NOT EXISTS fallback_embedding vector;
ALTER TABLE {s}.relations ADD COLUMN IF NOT EXISTS fallback_embedding vector;
ALTER TABLE {s}.communities ADD COLUMN IF NOT EXISTS fallback_embedding vector;
-- rows vector search cannot see, counted by every query (issue 13): usually none, so these stay empty
CREATE INDEX IF NOT EXISTS documents_unembedded ON {s}.documents (space) WHERE embedding IS NULL;
CREATE INDEX IF NOT EXISTS entities_unembedded ON {s}.entities (space) WHERE embedding IS NULL;
CREATE INDEX IF NOT EXISTS relations_unembedded ON {s}.relations (space) WHERE embedding IS NULL;
-- issue 15: the identity keys of each entity's canonical name and aliases (store.quality), in a narrow table
-- of their own: filling them never rewrites an entity row (nor its HNSW entry); relations whose predicate is
-- not lowercase ASCII (the duplicate-edge check: normally none); the live relations' predicates (the quality
-- counts per predicate, an index-only scan instead of reading every wide relation row)
CREATE TABLE IF NOT EXISTS {s}.entity_keys (
    space text NOT NULL,
    entity_id bigint NOT NULL,
    name_key text NOT NULL,
    alias_keys text[] NOT NULL,
    PRIMARY KEY (space, entity_id),
    FOREIGN KEY (space, entity_id) REFERENCES {s}.entities (space, id) ON DELETE CASCADE
);
-- the incremental stages read the entities holding given forms (graph.EntityForms)
CREATE INDEX IF NOT EXISTS entity_keys_name ON {s}.entity_keys (space, name_key);
CREATE INDEX IF NOT EXISTS entity_keys_aliases ON {s}.entity_keys USING gin (alias_keys);
CREATE INDEX IF NOT EXISTS relations_odd_predicate ON {s}.relations (space, source_id, target_id, negated)
    WHERE predicate <> lower(predicate COLLATE "C") OR octet_length(predicate) <> char_length(predicate);
CREATE INDEX IF NOT EXISTS relations_live_predicate ON {s}.relations (space, predicate)
    WHERE dormant_since IS NULL AND superseded_by IS NULL;
-- issue 30: what extraction still owes a space, read from narrow indexes (an anti-join of two index-only
-- scans), not from the wide chunk and extraction rows
CREATE INDEX IF NOT EXISTS documents_space_id ON {s}.documents (space, id);
-- issue 30: the chunks titled after an entity, read by a patch of the walk graph (its title edges)
CREATE INDEX IF NOT EXISTS documents_title_key ON {s}.documents (space, lower(btrim(title)))
    WHERE title <> '';
CREATE INDEX IF NOT EXISTS raw_extractions_first_ok ON {s}.raw_extractions (chunk_id, prompt_version)
    WHERE pass = 0 AND parse_status = 'ok';
CREATE INDEX IF NOT EXISTS raw_extractions_failed ON {s}.raw_extractions (space, chunk_id)
    WHERE parse_status <> 'ok';
CREATE TABLE IF NOT EXISTS {s}.stage_pending (
    space text NOT NULL,
    stage text NOT NULL,
    pending integer NOT NULL CHECK (pending >= 0),
    failures jsonb NOT NULL DEFAULT '[]',
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (space, stage)
);
"""
)


_CONTROL_PRESENT = """
SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')
   AND to_regclass('pgrag__control.llm_cache') IS NOT NULL
   AND to_regclass('pgrag__control.llm_evicted') IS NOT NULL
   AND to_regclass('pgrag__control.purges') IS NOT NULL
   AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('pgrag__control.realms')
                                            AND attname = 'embedding_convention' AND NOT attisdropped)
"""


def lock_ddl(conn: psycopg.Connection) -> None:
    """Take the schema lock (a transaction-level advisory lock) that serialises every DDL of pgrag —
    control and realm initialisation, re-embedding — until the current transaction ends."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))


@privileged
def init_control(conn: psycopg.Connection) -> None:
    """Create the pgvector extension and the control schema; idempotent and concurrency-safe.

    When they already exist this only reads the catalog (no DDL, no table lock).
    Raises :class:`DatabaseError` when the ``vector`` extension is not available on the server, or the
    role may not create it or the schema (one line saying what to ask the DBA for).
    """
    with conn.transaction():
        present = conn.execute(_CONTROL_PRESENT).fetchone()
    if present and present[0]:
        register_vector(conn)
        return
    with conn.transaction():
        lock_ddl(conn)
        try:
            for stmt in _statements(_CONTROL_DDL):
                conn.execute(sql.SQL(stmt))
            conn.execute(sql.SQL(purge.PURGE_DDL))
        except psycopg.errors.FeatureNotSupported as exc:
            raise DatabaseError(f"pgvector is not available on this server: {exc}") from exc
        except psycopg.errors.UndefinedFile as exc:
            raise DatabaseError(f"pgvector is not installed on this server: {exc}") from exc
    register_vector(conn)


@privileged
def init_realm(
    conn: psycopg.Connection, realm: str, *, embedding_model: str, dim: int, convention: str = "symmetric"
) -> bool:
    """Create realm ``realm``'s schema and tables at width ``dim`` and register its embedding model and
    its query/passage ``convention`` (:attr:`pgrag_dag.providers.embedding.Convention.name`).

    Idempotent; two processes may run it at once. When the realm is registered at the current
    :data:`SCHEMA_VERSION` with this model this only reads the registry and the catalog (returns
    ``False``) — and builds again any index a killed first load of vectors left dropped
    (:func:`pgrag_dag.store.deferred_indexes.restore`: normally none); otherwise it runs the DDL under the
    advisory lock and records the version (``True``).

    Raises :class:`SchemaMismatchError` when the realm is registered under another model, width or
    convention (``pgrag reembed`` switches a realm deliberately), or an embedding column is missing or
    has another width, and — before any DDL or write — when ``dim`` exceeds what an HNSW index can hold
    (4,000 dimensions, :mod:`pgrag_dag.store.vector_index`); :class:`~pgrag_dag.errors.InvalidNameError` for
    an invalid realm name, before any DDL; :class:`DatabaseError` for a privilege the role lacks (one line
    saying what to ask the DBA for).
    """
    validate_realm(realm)
    if not isinstance(dim, int) or not 1 <= dim <= 16000:
        raise SchemaMismatchError("embedding width", "1..16000", dim)
    vector_index.check_indexable(realm, schema_for(realm), EMBEDDED_TABLES, dim)
    init_control(conn)
    with conn.transaction():
        current = _realm_current(conn, realm, embedding_model, dim, convention)
        if current:
            verify_embedding_columns(conn, realm, dim)
    if current:
        # an index a killed first load of vectors left dropped: the stages read through it (usually nothing)
        deferred_indexes.restore(conn, realm)
        return False
    schema = schema_for(realm)
    with conn.transaction():
        lock_ddl(conn)
        if _realm_current(
            conn, realm, embedding_model, dim, convention
        ):  # another process built it while we waited
            return False
        row = conn.execute(
            "SELECT embedding_model, embedding_dim FROM pgrag__control.realms WHERE realm = %s", (realm,)
        ).fetchone()
        if row is None:
            conn.execute(
                """INSERT INTO pgrag__control.realms (realm, embedding_model, embedding_dim,
                   embedding_convention)
                   VALUES (%s, %s, %s, %s)""",
                (realm, embedding_model, dim, convention),
            )
        vector_type = sql.SQL("vector({})").format(sql.Literal(dim))
        for stmt in _statements(_REALM_DDL):
            conn.execute(sql.SQL(stmt).format(s=sql.Identifier(schema), v=vector_type))
        verify_embedding_columns(conn, realm, dim)
        outdated = drop_outdated_indexes(conn, realm)
        create_embedding_indexes(conn, realm, skip=outdated)
        history.create_history(conn, schema, vector_type)
        lineage.create_lineage(conn, schema)
        telemetry.create_telemetry(conn, schema)
        work_queue.create_work(conn, schema)
        vectors.create_text_hashes(conn, schema)
        source_files.create_source_files(conn, schema)
        quality.create_identity_keys(conn, realm)
        graph_version.create_graph_versions(conn, realm)
        tallies.create_tallies(conn, realm)
        deferred_indexes.create_deferred_indexes(conn, schema)
        conn.execute(
            "UPDATE pgrag__control.realms SET schema_version = %s WHERE realm = %s", (SCHEMA_VERSION, realm)
        )
    if outdated:  # said once the drop is committed, not before (an interrupt rolls it back)
        log.warning(
            "realm %s: the HNSW indexes of tables %s predate halfvec indexes (schema version 26); dropped, "
            "the next embeddings run (pgrag index) builds them again — vector searches scan until then",
            realm,
            ", ".join(outdated),
        )
    return True


def _realm_current(
    conn: psycopg.Connection, realm: str, embedding_model: str, dim: int, convention: str
) -> bool:
    """Whether ``realm`` is registered at :data:`SCHEMA_VERSION` (or later) with its schema present.

    Raises :class:`SchemaMismatchError` when it is registered under another model, width or convention.
    """
    row = conn.execute(
        """SELECT embedding_model, embedding_dim, embedding_convention, schema_version,
             to_regclass(%s) IS NOT NULL
             FROM pgrag__control.realms WHERE realm = %s""",
        (f"{schema_for(realm)}.stage_pending", realm),
    ).fetchone()
    if row is None:
        return False
    check_embedding(realm, (row[0], row[1], row[2]), (embedding_model, dim, convention))
    return row[3] >= SCHEMA_VERSION and row[4]


def _statements(ddl: str) -> list[str]:
    return [s.strip() for s in ddl.split(";\n") if s.strip()]
