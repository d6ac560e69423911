"""SQL of erasure (issue 28 item 2): the rows a document's text reached, their removal, and the purge log.

:mod:`pgrag_dag.operate.purge` runs these in one transaction under the partition lock and inside
:func:`pgrag_dag.store.history.forgetting` (history rows may be deleted, and chunks are deleted without
being archived into ``documents_removed``). Unlike ``pgrag delete document``, nothing of the document is
kept: its chunks, archived chunk versions, document events, the graph rows only it supported, and every
history row of those.

A document is named by its ``doc_key`` and every key it was renamed from (``belief_log`` ``renamed``
events, issue 16): the chain is one document. Its chunks are the live ones (``documents``) and the archived
versions (``documents_removed``: chunks it had before an edit).

``pgrag__control.purges`` records *that* a purge happened — realm, space, what (``document`` | ``space``),
the SHA-256 of the doc_key (never the key or any text), when, and the rows removed per table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgrag_dag.names import schema_for
from pgrag_dag.store.identifiers import qualified

PURGE_DDL = """
CREATE TABLE IF NOT EXISTS pgrag__control.purges (
    id bigserial PRIMARY KEY,
    realm text NOT NULL,
    space text NOT NULL,
    target text NOT NULL CHECK (target IN ('document', 'space')),
    doc_key_sha256 text CHECK (doc_key_sha256 ~ '^[0-9a-f]{64}$'),
    purged_at timestamptz NOT NULL DEFAULT now(),
    removed jsonb NOT NULL DEFAULT '{}'
)"""
"""The purge log (control schema; created by :func:`pgrag_dag.store.schema.init_control`)."""


MIN_NAME = 3
"""Shortest text :func:`scrub_stage_records` looks for."""


def record_purge(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    target: str,
    doc_key_sha256: str | None,
    removed: dict[str, int],
) -> int:
    """Append one ``pgrag__control.purges`` row in the caller's transaction; returns its id. ``removed`` is
    rows per table (counts only). Raises ``psycopg.errors.CheckViolation`` for a hash that is not 64
    lowercase hex digits."""
    row = conn.execute(
        """INSERT INTO pgrag__control.purges (realm, space, target, doc_key_sha256, removed)
           VALUES (%s, %s, %s, %s, %s) RETURNING id""",
        (realm, space, target, doc_key_sha256, Jsonb(removed)),
    ).fetchone()
    assert row is not None
    return int(row[0])


def purges(conn: psycopg.Connection, realm: str) -> list[dict[str, Any]]:
    """Every purge of ``realm`` recorded, oldest first: ``{"space", "target", "doc_key_sha256", "purged_at",
    "removed"}``."""
    rows = conn.execute(
        """SELECT space, target, doc_key_sha256, purged_at, removed FROM pgrag__control.purges
            WHERE realm = %s ORDER BY id""",
        (realm,),
    ).fetchall()
    keys = ("space", "target", "doc_key_sha256", "purged_at", "removed")
    return [dict(zip(keys, r)) for r in rows]


def document_keys(conn: psycopg.Connection, realm: str, space: str, doc_key: str) -> list[str]:
    """``doc_key`` and every key it was renamed from (transitively), the first one ``doc_key``."""
    rows = conn.execute(
        sql.SQL("""WITH RECURSIVE keys(k) AS (
                       SELECT %(key)s::text
                       UNION SELECT l.renamed_from FROM {t} l JOIN keys ON l.doc_key = keys.k
                              WHERE l.space = %(space)s AND l.kind = 'document' AND l.event = 'renamed')
                   SELECT k FROM keys""").format(t=qualified(realm, "belief_log")),
        {"space": space, "key": doc_key},
    ).fetchall()
    return [doc_key] + sorted({r[0] for r in rows} - {doc_key})


def document_events(conn: psycopg.Connection, realm: str, space: str, keys: Sequence[str]) -> int:
    """How many ``belief_log`` events name one of ``keys`` (a document removed earlier keeps its events)."""
    row = conn.execute(
        sql.SQL("""SELECT count(*) FROM {} WHERE space = %s AND kind = 'document'
                      AND (doc_key = ANY(%s) OR renamed_from = ANY(%s))""").format(
            qualified(realm, "belief_log")
        ),
        (space, list(keys), list(keys)),
    ).fetchone()
    return int(row[0]) if row else 0


def space_passages(conn: psycopg.Connection, realm: str, space: str) -> list[str]:
    """Every chunk text of ``space`` (live and archived), its gate decisions' and graph rows' descriptions and
    its community reports' summaries: what the model cache may quote of it (:func:`quoted_texts`' passages,
    for a whole space)."""
    rows = conn.execute(
        sql.SQL("""SELECT text FROM {d} WHERE space = %(space)s
                   UNION SELECT text FROM {a} WHERE space = %(space)s
                   UNION SELECT description FROM {g} WHERE space = %(space)s
                   UNION SELECT description FROM {e} WHERE space = %(space)s
                   UNION SELECT description FROM {r} WHERE space = %(space)s
                   UNION SELECT summary FROM {c} WHERE space = %(space)s""").format(
            d=qualified(realm, "documents"),
            a=qualified(realm, "documents_removed"),
            g=qualified(realm, "gate_decisions"),
            e=qualified(realm, "entities"),
            r=qualified(realm, "relations"),
            c=qualified(realm, "communities"),
        ),
        {"space": space},
    ).fetchall()
    return sorted({r[0] for r in rows if r[0]}, key=lambda t: (-len(t), t))


def document_chunks(
    conn: psycopg.Connection, realm: str, space: str, keys: Sequence[str]
) -> tuple[list[int], list[int]]:
    """``(live chunk ids, archived chunk ids)`` of the document named by ``keys``, each sorted."""
    live = conn.execute(
        sql.SQL("SELECT id FROM {} WHERE space = %s AND doc_key = ANY(%s) ORDER BY id").format(
            qualified(realm, "documents")
        ),
        (space, list(keys)),
    ).fetchall()
    archived = conn.execute(
        sql.SQL("SELECT id FROM {} WHERE space = %s AND doc_key = ANY(%s) ORDER BY id").format(
            qualified(realm, "documents_removed")
        ),
        (space, list(keys)),
    ).fetchall()
    return [int(r[0]) for r in live], [int(r[0]) for r in archived]


def quoted_texts(
    conn: psycopg.Connection, realm: str, space: str, live: Sequence[int], archived: Sequence[int]
) -> tuple[list[str], list[str], list[str]]:
    """``(passages, outputs, names)``: the texts a removed document can be quoted by. ``passages``: its
    chunks' texts (live and archived) and the descriptions its live chunks' gate decisions carry — what model
    prompts, reports and answers copy from it, sentence by sentence; ``outputs``: the model's raw extraction
    text of its live chunks (a cached response verbatim: matched whole, as its JSON skeleton is every
    response's); ``names``: the entity names, aliases and offending values of those decisions (short: matched
    only where a record of its own stages may quote them, never against the model cache, where other
    documents' prompts hold the same names). Each distinct, longest first."""
    args = {"space": space, "live": list(live), "archived": list(archived)}
    d, a, g, r = (
        qualified(realm, t) for t in ("documents", "documents_removed", "gate_decisions", "raw_extractions")
    )
    passages = conn.execute(
        sql.SQL("""SELECT text FROM {d} WHERE space = %(space)s AND id = ANY(%(live)s)
                   UNION SELECT text FROM {a} WHERE space = %(space)s AND id = ANY(%(archived)s)
                   UNION SELECT description FROM {g} WHERE space = %(space)s
                                                       AND chunk_id = ANY(%(live)s)""").format(d=d, a=a, g=g),
        args,
    ).fetchall()
    outputs = conn.execute(
        sql.SQL("SELECT raw_text FROM {r} WHERE space = %(space)s AND chunk_id = ANY(%(live)s)").format(r=r),
        args,
    ).fetchall()
    names = conn.execute(
        sql.SQL("""SELECT name FROM {g} WHERE space = %(space)s AND chunk_id = ANY(%(live)s)
                   UNION SELECT unnest(aliases) FROM {g} WHERE space = %(space)s AND chunk_id = ANY(%(live)s)
                   UNION SELECT offending_value FROM {g} WHERE space = %(space)s AND chunk_id = ANY(%(live)s)
                   UNION SELECT subject FROM {g} WHERE space = %(space)s AND chunk_id = ANY(%(live)s)
                   UNION SELECT object FROM {g} WHERE space = %(space)s
                                                  AND chunk_id = ANY(%(live)s)""").format(g=g),
        args,
    ).fetchall()

    def distinct(rows: list[Any]) -> list[str]:
        return sorted({x[0] for x in rows if x[0]}, key=lambda t: (-len(t), t))

    return distinct(passages), distinct(outputs), distinct(names)


def descriptions(
    conn: psycopg.Connection, realm: str, space: str, entity_ids: Sequence[int], relation_ids: Sequence[int]
) -> dict[tuple[str, int], str]:
    """``(kind, id)`` → description of the entities (``"entity"``) and relations (``"relation"``) given,
    where it is not empty: read before a purge changes them, so that what a removed document gave them can
    be matched where it was copied (reports, their cached prompts)."""
    rows = conn.execute(
        sql.SQL("""SELECT 'entity', id, description FROM {e} WHERE space = %(space)s AND id = ANY(%(ents)s)
                   UNION ALL
                   SELECT 'relation', id, description FROM {r} WHERE space = %(space)s
                                                                AND id = ANY(%(rels)s)""").format(
            e=qualified(realm, "entities"), r=qualified(realm, "relations")
        ),
        {"space": space, "ents": list(entity_ids), "rels": list(relation_ids)},
    ).fetchall()
    return {(str(k), int(i)): str(d) for k, i, d in rows if d}


def report_summaries(conn: psycopg.Connection, realm: str, space: str, ids: Sequence[int]) -> list[str]:
    """The summaries of community reports ``ids``: a report's cached model response holds its summary, and
    a parent's prompt its children's."""
    rows = conn.execute(
        sql.SQL("SELECT summary FROM {} WHERE space = %s AND id = ANY(%s)").format(
            qualified(realm, "communities")
        ),
        (space, list(ids)),
    ).fetchall()
    return [str(r[0]) for r in rows if r[0]]


def supported_graph(
    conn: psycopg.Connection, realm: str, space: str, chunks: Sequence[int]
) -> tuple[list[int], list[int], list[int], list[int]]:
    """What the document's ``chunks`` (live and archived ids) supported: ``(relations only they support,
    relations they and other chunks support, entities only they support, entities other support keeps)``.

    A relation is supported by its ``chunk_ids``. An entity is supported by the chunks that mention it
    (``doc_mentions``; archived chunks: ``documents_removed.entity_ids``) and by the relations that keep
    it as an endpoint; it goes when its only support is ``chunks`` and the relations that go."""
    r, m, a, e = (qualified(realm, t) for t in ("relations", "doc_mentions", "documents_removed", "entities"))
    args = {"space": space, "chunks": list(chunks)}
    rels = conn.execute(
        sql.SQL("""SELECT id, chunk_ids <@ %(chunks)s::bigint[] FROM {r}
                    WHERE space = %(space)s AND chunk_ids && %(chunks)s::bigint[] ORDER BY id""").format(r=r),
        args,
    ).fetchall()
    gone_rels = [int(i) for i, only in rels if only]
    kept_rels = [int(i) for i, only in rels if not only]
    args["gone_rels"] = gone_rels
    touched = conn.execute(
        sql.SQL("""SELECT entity_id FROM {m} WHERE space = %(space)s AND chunk_id = ANY(%(chunks)s)
                   UNION SELECT unnest(entity_ids) FROM {a} WHERE space = %(space)s AND id = ANY(%(chunks)s)
                   UNION SELECT unnest(ARRAY[source_id, target_id]) FROM {r}
                    WHERE space = %(space)s AND id = ANY(%(gone_rels)s)""").format(m=m, a=a, r=r),
        args,
    ).fetchall()
    args["touched"] = sorted({int(t[0]) for t in touched})
    rows = conn.execute(
        sql.SQL("""SELECT e.id,
                          EXISTS (SELECT 1 FROM {m} x WHERE x.space = e.space AND x.entity_id = e.id
                                     AND NOT x.chunk_id = ANY(%(chunks)s))
                       OR EXISTS (SELECT 1 FROM {a} x WHERE x.space = e.space AND x.entity_ids @> ARRAY[e.id]
                                     AND NOT x.id = ANY(%(chunks)s))
                       OR EXISTS (SELECT 1 FROM {r} x WHERE x.space = e.space
                                     AND (x.source_id = e.id OR x.target_id = e.id)
                                     AND NOT x.id = ANY(%(gone_rels)s))
                     FROM {e} e WHERE e.space = %(space)s AND e.id = ANY(%(touched)s)
                    ORDER BY e.id""").format(m=m, a=a, r=r, e=e),
        args,
    ).fetchall()
    return (
        gone_rels,
        kept_rels,
        [int(i) for i, kept in rows if not kept],
        [int(i) for i, kept in rows if kept],
    )


def communities_of(conn: psycopg.Connection, realm: str, space: str, entity_ids: Sequence[int]) -> list[int]:
    """The communities of ``space`` with one of ``entity_ids`` among their members, and every ancestor of
    those (a parent's report summarises its children's): the reports that may quote them."""
    rows = conn.execute(
        sql.SQL("""WITH RECURSIVE hit(id) AS (
                       SELECT community_id FROM {m} WHERE space = %(space)s AND entity_id = ANY(%(ids)s)
                       UNION SELECT up.id FROM hit CROSS JOIN LATERAL (
                           SELECT ch.parent_id FROM {ch} ch WHERE ch.child_id = hit.id
                           UNION SELECT c.parent_id FROM {c} c WHERE c.id = hit.id AND c.parent_id IS NOT NULL
                       ) AS up(id))
                   SELECT id FROM hit ORDER BY id""").format(
            m=qualified(realm, "community_members"),
            ch=qualified(realm, "community_children"),
            c=qualified(realm, "communities"),
        ),
        {"space": space, "ids": list(entity_ids)},
    ).fetchall()
    return [int(r[0]) for r in rows]


def count_chunk_rows(
    conn: psycopg.Connection, realm: str, space: str, chunks: Sequence[int]
) -> dict[str, int]:
    """Rows of ``chunks`` (live ids) in the staging tables that cascade from ``documents``:
    ``raw_extractions``, ``gate_decisions``, ``resolution_rejections``, ``doc_mentions``."""
    out = {}
    for table in ("raw_extractions", "gate_decisions", "resolution_rejections", "doc_mentions"):
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE space = %s AND chunk_id = ANY(%s)").format(
                qualified(realm, table)
            ),
            (space, list(chunks)),
        ).fetchone()
        out[table] = int(row[0]) if row else 0
    return out


def delete_document_rows(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    keys: Sequence[str],
    live: Sequence[int],
    archived: Sequence[int],
    relations: Sequence[int],
    entities: Sequence[int],
    communities: Sequence[int],
) -> dict[str, int]:
    """Delete, in the caller's forgetting transaction, the document's rows and what only it supported:
    ``communities`` (members, sources and children cascade; the space's other reports are marked stale, the
    sources they record lose the removed chunks and relations, and the reports earlier rebuilds replaced —
    ``communities_expired`` — are all removed: which of them quote the document can no longer be told), the
    ``relations`` and ``entities`` given with their belief history, the document's events in ``belief_log``
    (under any of ``keys``), its ``live`` chunks (their raw extractions, gate decisions, rejections and
    mentions cascade) and ``archived`` chunk versions.
    A relation that one of ``relations`` superseded is current again (its superseding evidence is gone).
    Returns rows removed per table (``*.entity_ids`` / ``*.community_ids``: rows an id was taken out of);
    ``belief_log`` counts the rows removed, not the ``deleted`` tombstones the graph deletes append."""
    args = {
        "space": space,
        "keys": list(keys),
        "live": list(live),
        "archived": list(archived),
        "rels": list(relations),
        "ents": list(entities),
        "comms": list(communities),
    }
    out = count_chunk_rows(conn, realm, space, live)

    def run(key: str, table: str, stmt: str) -> None:
        n = conn.execute(sql.SQL(stmt).format(t=qualified(realm, table)), args).rowcount
        out[key] = out.get(key, 0) + n

    run("communities", "communities", "DELETE FROM {t} WHERE space = %(space)s AND id = ANY(%(comms)s)")
    # reports earlier rebuilds replaced (kept for belief-time queries) may quote the document, and which do
    # can no longer be told (their sources went with them): the space's are all removed
    run("communities_expired", "communities_expired", "DELETE FROM {t} WHERE space = %(space)s")
    # the sources the remaining reports record name removed chunks and relations by id: forget those
    run(
        "community_sources",
        "community_sources",
        """DELETE FROM {t} WHERE space = %(space)s
             AND (relation_id = ANY(%(rels)s) OR chunk_id = ANY(%(live)s || %(archived)s))""",
    )
    # the reports left were built from the same graph: a fingerprint no graph has makes the next communities
    # run rebuild every level (an unchanged-looking graph would otherwise keep the removed reports missing)
    run(
        "communities (marked stale)",
        "communities",
        """UPDATE {t} SET graph_fingerprint = 'stale: reports removed by a purge'
            WHERE space = %(space)s AND cardinality(%(comms)s::bigint[]) > 0""",
    )
    run(
        "belief_log",
        "belief_log",
        """DELETE FROM {t} WHERE space = %(space)s
             AND ((kind = 'document' AND (doc_key = ANY(%(keys)s) OR renamed_from = ANY(%(keys)s)))
               OR (kind = 'relation' AND object_id = ANY(%(rels)s))
               OR (kind = 'entity' AND object_id = ANY(%(ents)s)))""",
    )
    run(
        "relation_belief",
        "relation_belief",
        "DELETE FROM {t} WHERE space = %(space)s AND relation_id = ANY(%(rels)s)",
    )
    run(
        "entity_belief",
        "entity_belief",
        "DELETE FROM {t} WHERE space = %(space)s AND entity_id = ANY(%(ents)s)",
    )
    run(
        "relations.superseded_by (restored)",
        "relations",
        """UPDATE {t} SET superseded_by = NULL, t_expired = NULL
            WHERE space = %(space)s AND superseded_by = ANY(%(rels)s) AND NOT id = ANY(%(rels)s)""",
    )
    run("documents", "documents", "DELETE FROM {t} WHERE space = %(space)s AND id = ANY(%(live)s)")
    run("source_files", "source_files", "DELETE FROM {t} WHERE space = %(space)s AND doc_key = ANY(%(keys)s)")
    run(
        "documents_removed",
        "documents_removed",
        "DELETE FROM {t} WHERE space = %(space)s AND id = ANY(%(archived)s)",
    )
    run(
        "documents_removed.entity_ids",
        "documents_removed",
        """UPDATE {t} SET entity_ids = ARRAY(SELECT x FROM unnest(entity_ids) AS x WHERE x <> ALL (%(ents)s))
            WHERE space = %(space)s AND entity_ids && %(ents)s::bigint[]""",
    )
    run(
        "doc_mentions",
        "doc_mentions",
        "DELETE FROM {t} WHERE space = %(space)s AND entity_id = ANY(%(ents)s)",
    )
    run(
        "community_members",
        "community_members",
        "DELETE FROM {t} WHERE space = %(space)s AND entity_id = ANY(%(ents)s)",
    )
    run("relations", "relations", "DELETE FROM {t} WHERE space = %(space)s AND id = ANY(%(rels)s)")
    run("entities", "entities", "DELETE FROM {t} WHERE space = %(space)s AND id = ANY(%(ents)s)")
    # the work queue names removed chunks and entities by id: a later stage finds nothing behind them
    run(
        "stage_work",
        "stage_work",
        """DELETE FROM {t} WHERE space = %(space)s
             AND ((kind = 'chunk' AND item = ANY(%(live)s || %(archived)s))
                                                      OR (kind = 'entity' AND item = ANY(%(ents)s)))""",
    )
    return out


def scrub_stage_records(conn: psycopg.Connection, realm: str, space: str, needles: Sequence[str]) -> int:
    """Clear what the space's stage records quote of ``needles`` (texts, in the JSON-escaped form
    :func:`json_forms` gives too): a ``stage_state.report`` quoting one is dropped (the stage's next run
    writes it anew), a ``stage_pending`` failure line quoting one is replaced by ``(removed by purge)``.
    Returns rows changed. Needles under :data:`MIN_NAME` characters are left out (a two-letter name, or a
    pronoun a gate refused, is in every report)."""
    forms = json_forms([n for n in needles if len(n) >= MIN_NAME])
    if not forms:
        return 0
    quoting = sql.SQL("EXISTS (SELECT 1 FROM unnest(%(forms)s::text[]) n WHERE strpos({col}::text, n) > 0)")
    args = {"space": space, "forms": forms}
    n = conn.execute(
        sql.SQL("UPDATE {t} SET report = NULL WHERE space = %(space)s AND report IS NOT NULL AND {q}").format(
            t=qualified(realm, "stage_state"), q=quoting.format(col=sql.Identifier("report"))
        ),
        args,
    ).rowcount
    n += conn.execute(
        sql.SQL("""UPDATE {t} SET failures = (
                       SELECT coalesce(jsonb_agg(CASE WHEN EXISTS (SELECT 1 FROM unnest(%(forms)s::text[]) n
                                                                   WHERE strpos(f.value::text, n) > 0)
                                                      THEN to_jsonb('(removed by purge)'::text)
                                                      ELSE f.value END
                                                 ORDER BY f.ord), '[]'::jsonb)
                         FROM jsonb_array_elements(failures) WITH ORDINALITY AS f(value, ord))
                   WHERE space = %(space)s AND {q}""").format(
            t=qualified(realm, "stage_pending"), q=quoting.format(col=sql.Identifier("failures"))
        ),
        args,
    ).rowcount
    return n


def json_forms(texts: Sequence[str]) -> list[str]:
    """Each text as written and as it appears inside a JSON string (``jsonb::text`` escapes quotes,
    backslashes and control characters as Python's ``json.dumps(ensure_ascii=False)`` does), distinct."""
    out: dict[str, None] = {}
    for t in texts:
        out[t] = None
        out[json.dumps(t, ensure_ascii=False)[1:-1]] = None
    return list(out)


def refresh_statistics(conn: psycopg.Connection, realm: str) -> list[str]:
    """``ANALYZE`` every table of realm ``realm``'s schema and the control schema's model cache, on an
    autocommit connection after the purge committed: PostgreSQL's planner statistics (``pg_statistic``,
    read through ``pg_stats``) keep sampled column values — most common values, histogram bounds — which
    quote the purged text until the table is analysed again. Returns the tables analysed (schema-qualified).
    The catalogue's superseded statistics rows stay on disk until ``pg_statistic`` is vacuumed (said in
    :data:`pgrag_dag.operate.purge.UNREACHABLE`)."""
    rows = conn.execute(
        "SELECT schemaname, tablename FROM pg_tables WHERE schemaname = %s"
        " OR (schemaname = 'pgrag__control' AND tablename = 'llm_cache') ORDER BY 1, 2",
        (schema_for(realm),),
    ).fetchall()
    for schema, table in rows:
        conn.execute(sql.SQL("ANALYZE {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))
    return [f"{schema}.{table}" for schema, table in rows]
