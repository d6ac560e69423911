"""SQL for the staging tables: ``raw_extractions``, ``gate_decisions`` and ``stage_pending``.

Raw extractions are kept, so changing a gate re-materialises ``gated_triples`` and everything
downstream with zero model calls. Work that failed is work still to do (issue 11): a chunk without a
successful first pass, or with a gleaning pass that failed on the model (``model_error``), is extracted
again by the next run; ``stage_pending`` records what a stage could not finish (failed community reports).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import polars as pl
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgrag_dag.frames import DECISION_SCHEMA, RAW_SCHEMA
from pgrag_dag.store.identifiers import qualified


def chunks_needing_extraction(
    conn: psycopg.Connection, realm: str, space: str, *, extractor: str, also: list[int] | None = None
) -> pl.DataFrame:
    """Chunks with no successful first pass by ``extractor`` (an extractor identity, stored in
    ``prompt_version``) — new, changed, failed before, or extracted by another extractor — or with a
    gleaning pass of it that failed on the model, and the chunks ``also`` names (chunk ids); in
    document order: chunk_id, doc_key, chunk_index, title, source, text."""
    # the owed chunk ids first, from narrow indexes (documents_space_id, raw_extractions_first_ok,
    # raw_extractions_failed; issue 30), then their rows
    rows = conn.execute(
        sql.SQL("""WITH owed AS (
                        SELECT d.id FROM {d} d WHERE d.space = %(space)s AND NOT EXISTS (
                               SELECT 1 FROM {r} r WHERE r.chunk_id = d.id AND r.pass = 0
                                  AND r.parse_status = 'ok' AND r.prompt_version = %(x)s)
                        UNION SELECT unnest(%(also)s::bigint[])
                        UNION SELECT r.chunk_id FROM {r} r
                               WHERE r.space = %(space)s AND r.parse_status <> 'ok'
                                 AND r.parse_status = 'model_error' AND r.pass > 0
                                 AND r.prompt_version = %(x)s)
                   SELECT d.id, d.doc_key, d.chunk_index, d.title, d.source, d.text FROM owed o
                     JOIN {d} d ON d.id = o.id WHERE d.space = %(space)s
                    ORDER BY d.doc_order, d.doc_key, d.chunk_index""").format(
            d=qualified(realm, "documents"), r=qualified(realm, "raw_extractions")
        ),
        {"space": space, "also": also or [], "x": extractor},
    ).fetchall()
    schema = {
        "chunk_id": pl.Int64,
        "doc_key": pl.String,
        "chunk_index": pl.Int64,
        "title": pl.String,
        "source": pl.String,
        "text": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def completed_passes(
    conn: psycopg.Connection, realm: str, space: str, chunk_ids: list[int], *, extractor: str
) -> dict[int, list[dict[str, object]]]:
    """For chunks being extracted again because a gleaning pass failed: chunk_id → the stored rows
    (``raw_extractions`` frame rows, as dicts) of ``extractor``'s successful passes 0..p-1 before the
    first failed pass p, so the extractor resumes at p without asking again what succeeded.
    Chunks whose first pass did not succeed are absent."""
    rows = conn.execute(
        sql.SQL("""SELECT r.chunk_id, r.pass, r.model, r.prompt_version, r.raw_text, r.parsed::text,
                          r.parse_status,
                          r.error, r.prompt_tokens, r.completion_tokens, r.cache_hit
                     FROM {} r WHERE r.space = %s AND r.chunk_id = ANY(%s) AND r.prompt_version = %s
                    ORDER BY r.chunk_id, r.pass""").format(qualified(realm, "raw_extractions")),
        (space, chunk_ids, extractor),
    ).fetchall()
    out: dict[int, list[dict[str, object]]] = {}
    broken: set[int] = set()
    for row in rows:
        record = dict(zip(RAW_SCHEMA, row))
        cid = int(record["chunk_id"])
        if cid in broken or record["parse_status"] != "ok" or record["pass"] != len(out.get(cid, [])):
            broken.add(cid)
            continue
        out.setdefault(cid, []).append(record)
    return out


def parse_failures(
    conn: psycopg.Connection, realm: str, space: str, *, extractor: str | None = None
) -> pl.DataFrame:
    """The space's stored ``parse_error`` rows that kept their raw text (the ``raw_extractions``
    frame), of ``extractor`` (an identity) or of any; by chunk and pass."""
    rows = conn.execute(
        sql.SQL("""SELECT r.chunk_id, r.pass, r.model, r.prompt_version, r.raw_text, r.parsed::text,
                          r.parse_status,
                          r.error, r.prompt_tokens, r.completion_tokens, r.cache_hit
                     FROM {} r WHERE r.space = %s AND r.parse_status = 'parse_error'
                      AND r.raw_text IS NOT NULL
                      AND (%s::text IS NULL OR r.prompt_version = %s) ORDER BY r.chunk_id, r.pass""").format(
            qualified(realm, "raw_extractions")
        ),
        (space, extractor, extractor),
    ).fetchall()
    return pl.DataFrame(rows, schema=RAW_SCHEMA, orient="row")


def owe_again(
    conn: psycopg.Connection, realm: str, space: str, passes: list[tuple[int, int]], reason: str
) -> int:
    """Mark stored passes ((chunk_id, pass) pairs) as work still to do — ``model_error`` with
    ``reason`` — so the next run asks for them again (a first pass, or gleaning resumed at that pass).
    Returns the rows marked."""
    if not passes:
        return 0
    cur = conn.execute(
        sql.SQL("""UPDATE {} r SET parse_status = 'model_error', error = %s FROM unnest(%s::bigint[],
                    %s::int[]) AS u(c, p)
                    WHERE r.space = %s AND r.chunk_id = u.c AND r.pass = u.p""").format(
            qualified(realm, "raw_extractions")
        ),
        (reason, [c for c, _ in passes], [p for _, p in passes], space),
    )
    return cur.rowcount


def pending_extraction(
    conn: psycopg.Connection, realm: str, space: str, *, extractor: str
) -> dict[str, object]:
    """What extraction still owes the space: ``chunks_without_first_pass`` (no successful pass 0 by
    ``extractor``), ``gleaning_passes_failed`` (model errors, retried next run), ``pending`` (their sum)
    and up to five ``examples`` (``doc_key#chunk_index pass p: error``)."""
    # a chunk without a successful first pass: its first pass's error, or "not extracted yet" when the
    # extractor has no row of it; and every gleaning pass that failed on the model — read from narrow
    # indexes (issue 30), then joined to the few chunks they name
    rows = conn.execute(
        sql.SQL("""WITH owed AS (
                        SELECT d.id FROM {d} d WHERE d.space = %(space)s AND NOT EXISTS (
                               SELECT 1 FROM {r} r WHERE r.chunk_id = d.id AND r.pass = 0
                                  AND r.parse_status = 'ok' AND r.prompt_version = %(x)s)),
                        pending AS (
                        SELECT o.id, 0 AS pass, coalesce(r.error, 'not extracted yet') AS error, true AS first
                          FROM owed o LEFT JOIN {r} r ON r.chunk_id = o.id AND r.pass = 0
                                                    AND r.prompt_version = %(x)s
                         WHERE r.chunk_id IS NOT NULL OR NOT EXISTS (
                               SELECT 1 FROM {r} x WHERE x.chunk_id = o.id AND x.prompt_version = %(x)s)
                        UNION ALL
                        SELECT r.chunk_id, r.pass, r.error, false FROM {r} r
                         WHERE r.space = %(space)s AND r.parse_status <> 'ok'
                           AND r.parse_status = 'model_error' AND r.pass > 0 AND r.prompt_version = %(x)s)
                   SELECT d.doc_key, d.chunk_index, p.pass, p.error, p.first FROM pending p
                     JOIN {d} d ON d.id = p.id WHERE d.space = %(space)s
                    ORDER BY d.doc_order, d.doc_key, d.chunk_index, 3""").format(
            d=qualified(realm, "documents"), r=qualified(realm, "raw_extractions")
        ),
        {"space": space, "x": extractor},
    ).fetchall()
    firsts = sum(1 for r in rows if r[4])
    return {
        "chunks_without_first_pass": firsts,
        "gleaning_passes_failed": len(rows) - firsts,
        "pending": len(rows),
        "examples": [f"{k}#{i} pass {p}: {e}" for k, i, p, e, _ in rows[:5]],
    }


def record_pending(conn: psycopg.Connection, realm: str, space: str, stage: str, failures: list[str]) -> None:
    """Record the work ``stage`` could not finish for the space (``failures``: one line each); an
    empty list clears it."""
    table = qualified(realm, "stage_pending")
    if not failures:
        conn.execute(sql.SQL("DELETE FROM {} WHERE space = %s AND stage = %s").format(table), (space, stage))
        return
    conn.execute(
        sql.SQL("""INSERT INTO {} (space, stage, pending, failures) VALUES (%s, %s, %s, %s)
                            ON CONFLICT (space, stage) DO UPDATE SET pending = excluded.pending,
                                failures = excluded.failures, recorded_at = now()""").format(table),
        (space, stage, len(failures), Jsonb(failures)),
    )


def load_pending(conn: psycopg.Connection, realm: str, space: str, stage: str) -> list[str]:
    """The failures :func:`record_pending` recorded for ``stage`` of the space (empty: nothing pending)."""
    row = conn.execute(
        sql.SQL("SELECT failures FROM {} WHERE space = %s AND stage = %s").format(
            qualified(realm, "stage_pending")
        ),
        (space, stage),
    ).fetchone()
    return list(row[0]) if row else []


def document_names(
    conn: psycopg.Connection, realm: str, space: str, doc_keys: list[str], *, extractor: str
) -> dict[str, list[tuple[int, list[str]]]]:
    """For each document, (chunk_index, entity names) of its stored successful extractions by
    ``extractor`` (an extractor identity), in document order — the seed of the document context
    (§4.1) when part of a document is extracted again. Another extractor's names never seed it."""
    rows = conn.execute(
        # md5(doc_key): the documents' chunks through documents_space_key_chunk, not a scan of the space
        sql.SQL("""SELECT d.doc_key, d.chunk_index, r.parsed FROM {d} d JOIN {r} r ON r.chunk_id = d.id
                    WHERE d.space = %(space)s
                      AND md5(d.doc_key) = ANY(ARRAY(SELECT md5(k) FROM unnest(%(keys)s::text[]) k))
                      AND d.doc_key = ANY(%(keys)s) AND r.parse_status = 'ok' AND r.prompt_version = %(x)s
                    ORDER BY d.doc_key, d.chunk_index, r.pass""").format(
            r=qualified(realm, "raw_extractions"), d=qualified(realm, "documents")
        ),
        {"space": space, "keys": doc_keys, "x": extractor},
    ).fetchall()
    out: dict[str, list[tuple[int, list[str]]]] = {}
    for doc_key, chunk_index, parsed in rows:
        names = [e.get("name") for e in parsed.get("entities", []) if isinstance(e.get("name"), str)]
        out.setdefault(doc_key, []).append((chunk_index, names))
    return out


def open_incoming_raw(conn: psycopg.Connection) -> None:
    """Create (when missing) and empty the session's temporary table ``pgrag_incoming_raw``: the rows a
    ``raw_extractions`` run extracted, added batch by batch (:func:`add_raw`) and written at the end
    (:func:`merge_raw`), so a run holds one batch of responses in Python, not the space's (issue 30). It
    lives as long as the connection (the run's model calls are made outside any transaction)."""
    conn.execute("""CREATE TEMP TABLE IF NOT EXISTS pgrag_incoming_raw (
                        seq bigint, chunk_id bigint, pass integer, model text, prompt_version text,
                        raw_text text, parsed jsonb, parse_status text, error text, prompt_tokens integer,
                        completion_tokens integer, cache_hit boolean)""")
    conn.execute("TRUNCATE pgrag_incoming_raw")


def add_raw(conn: psycopg.Connection, raw: pl.DataFrame, seq: int) -> int:
    """Copy the ``raw`` frame (``RAW_SCHEMA``) into ``pgrag_incoming_raw``, its rows numbered from ``seq``
    (their order in the run); returns the next number."""
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY pgrag_incoming_raw (seq, chunk_id, pass, model, prompt_version, raw_text, parsed,"
            " parse_status, error, prompt_tokens, completion_tokens, cache_hit) FROM STDIN"
        ) as copy,
    ):
        for r in raw.iter_rows(named=True):
            copy.write_row(
                (
                    seq,
                    r["chunk_id"],
                    r["pass"],
                    r["model"],
                    r["prompt_version"],
                    r["raw_text"],
                    Jsonb(json.loads(r["parsed"])) if r["parsed"] else None,
                    r["parse_status"],
                    r["error"],
                    r["prompt_tokens"],
                    r["completion_tokens"],
                    r["cache_hit"],
                )
            )
            seq += 1
    return seq


def merge_raw(conn: psycopg.Connection, realm: str, space: str) -> int:
    """Replace the raw rows of the chunks in ``pgrag_incoming_raw`` with its rows, in their order (ids
    follow it), then empty it; returns the rows written."""
    table = qualified(realm, "raw_extractions")
    conn.execute("ANALYZE pgrag_incoming_raw")  # a temporary table has no statistics until analysed
    conn.execute(
        sql.SQL("DELETE FROM {} WHERE chunk_id IN (SELECT chunk_id FROM pgrag_incoming_raw)").format(table)
    )
    written = conn.execute(
        sql.SQL("""INSERT INTO {} (space, chunk_id, pass, model, prompt_version, raw_text, parsed,
                                   parse_status, error, prompt_tokens, completion_tokens, cache_hit)
                   SELECT %s, chunk_id, pass, model, prompt_version, raw_text, parsed, parse_status, error,
                          prompt_tokens, completion_tokens, cache_hit
                     FROM pgrag_incoming_raw ORDER BY seq""").format(table),
        (space,),
    ).rowcount
    conn.execute("TRUNCATE pgrag_incoming_raw")
    return written


def load_raw(
    conn: psycopg.Connection, realm: str, space: str, chunk_ids: Sequence[int] | None = None
) -> pl.DataFrame:
    """The space's raw extraction rows (the ``raw_extractions`` frame), in document order then pass: every
    one, or only those of ``chunk_ids`` (an incremental run, issue 15)."""
    only = sql.SQL(" AND r.chunk_id = ANY(%s)") if chunk_ids is not None else sql.SQL("")
    rows = conn.execute(
        sql.SQL("""SELECT r.chunk_id, r.pass, r.model, r.prompt_version, r.raw_text, r.parsed::text,
                          r.parse_status,
                          r.error, r.prompt_tokens, r.completion_tokens, r.cache_hit
                     FROM {r} r JOIN {d} d ON d.id = r.chunk_id WHERE r.space = %s{only}
                    ORDER BY d.doc_order, d.doc_key, d.chunk_index, r.pass""").format(
            r=qualified(realm, "raw_extractions"), d=qualified(realm, "documents"), only=only
        ),
        (space, list(chunk_ids)) if chunk_ids is not None else (space,),
    ).fetchall()
    return pl.DataFrame(rows, schema=RAW_SCHEMA, orient="row")


def raw_chunks(conn: psycopg.Connection, realm: str, space: str) -> list[int]:
    """The ids of the space's chunks holding a raw extraction row, in document order (the order of
    :func:`load_raw`)."""
    return [
        r[0]
        for r in conn.execute(
            sql.SQL("""SELECT d.id FROM {d} d WHERE d.space = %s
                          AND EXISTS (SELECT 1 FROM {r} r WHERE r.chunk_id = d.id AND r.space = d.space)
                        ORDER BY d.doc_order, d.doc_key, d.chunk_index""").format(
                r=qualified(realm, "raw_extractions"), d=qualified(realm, "documents")
            ),
            (space,),
        ).fetchall()
    ]


def delete_decisions_without_raw(conn: psycopg.Connection, realm: str, space: str) -> int:
    """Delete the space's gate decisions of chunks holding no raw extraction row (what a full re-gate of the
    raw rows cannot write again); returns how many."""
    return conn.execute(
        sql.SQL("""DELETE FROM {g} g WHERE g.space = %s AND NOT EXISTS (
                       SELECT 1 FROM {r} r WHERE r.chunk_id = g.chunk_id AND r.space = g.space)""").format(
            g=qualified(realm, "gate_decisions"), r=qualified(realm, "raw_extractions")
        ),
        (space,),
    ).rowcount


def space_yield(conn: psycopg.Connection, realm: str, space: str) -> dict[str, bool]:
    """Whether the space holds, anywhere: a chunk (``chunks``), an ``ok`` extraction with an entity or a
    triple (``extracted``), an extraction at all (``raw``), an accepted gate decision (``accepted``) — what
    the ``yield`` check of an incremental run adds to its own batch's counts (index look-ups, no scan of the
    space)."""
    row = conn.execute(
        sql.SQL("""SELECT EXISTS (SELECT 1 FROM {d} WHERE space = %s),
            EXISTS (SELECT 1 FROM {r} WHERE space = %s AND parse_status = 'ok'
                      AND (jsonb_array_length(coalesce(parsed->'entities', '[]')) > 0
                           OR jsonb_array_length(coalesce(parsed->'triples', '[]')) > 0)),
            EXISTS (SELECT 1 FROM {r} WHERE space = %s),
            EXISTS (SELECT 1 FROM {g} WHERE space = %s AND accepted)""").format(
            d=qualified(realm, "documents"),
            r=qualified(realm, "raw_extractions"),
            g=qualified(realm, "gate_decisions"),
        ),
        (space,) * 4,
    ).fetchone()
    assert row is not None
    return dict(zip(("chunks", "extracted", "raw", "accepted"), row))


_DECISION_COLS = [c for c in DECISION_SCHEMA]


def replace_decisions(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    decisions: pl.DataFrame,
    chunk_ids: Sequence[int] | None = None,
) -> int:
    """Replace the space's gate decisions — all of them, or only those of ``chunk_ids`` (an incremental
    run) — with ``decisions`` (the ``gate_decisions`` frame). Returns the rows deleted plus the rows
    written."""
    table = qualified(realm, "gate_decisions")
    if chunk_ids is None:
        deleted = conn.execute(sql.SQL("DELETE FROM {} WHERE space = %s").format(table), (space,)).rowcount
    else:
        deleted = conn.execute(
            sql.SQL("DELETE FROM {} WHERE space = %s AND chunk_id = ANY(%s)").format(table),
            (space, list(chunk_ids)),
        ).rowcount
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in ["space", *_DECISION_COLS])
    with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(table, cols)) as copy:
        for r in decisions.iter_rows(named=True):
            copy.write_row((space, *[r[c] for c in _DECISION_COLS]))
    return deleted + decisions.height


def load_decisions(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    accepted_only: bool = True,
    chunk_ids: Sequence[int] | None = None,
) -> pl.DataFrame:
    """The space's gate decisions (the ``gate_decisions`` frame) in document order (document, chunk, pass):
    every one, or only those of ``chunk_ids``."""
    cols = sql.SQL(", ").join(sql.Identifier("g", c) for c in _DECISION_COLS)
    where: sql.Composable = sql.SQL(" AND g.accepted") if accepted_only else sql.SQL("")
    if chunk_ids is not None:
        where = sql.SQL("{} AND g.chunk_id = ANY(%s)").format(where)
    rows = conn.execute(
        sql.SQL("""SELECT {} FROM {} g JOIN {} d ON d.id = g.chunk_id WHERE g.space = %s{}
                    ORDER BY d.doc_order, d.doc_key, d.chunk_index, g.pass, g.id""").format(
            cols, qualified(realm, "gate_decisions"), qualified(realm, "documents"), where
        ),
        (space, list(chunk_ids)) if chunk_ids is not None else (space,),
    ).fetchall()
    return pl.DataFrame(rows, schema=DECISION_SCHEMA, orient="row")


def iter_decisions(
    conn: psycopg.Connection, realm: str, space: str, *, kind: str | None = None, batch: int
) -> Iterator[pl.DataFrame]:
    """The space's accepted gate decisions (of ``kind``, ``entity`` or ``triple``, or both), in the order of
    :func:`load_decisions`, as frames of at most ``batch`` rows — read through a server-side cursor in the
    caller's transaction, so a full run never holds the space's decisions at once (issue 30)."""
    cols = sql.SQL(", ").join(sql.Identifier("g", c) for c in _DECISION_COLS)
    where: sql.Composable = sql.SQL(" AND g.kind = %s") if kind is not None else sql.SQL("")
    with conn.cursor(name="pgrag_decisions") as cur:
        cur.execute(
            sql.SQL("""SELECT {} FROM {} g JOIN {} d ON d.id = g.chunk_id WHERE g.space = %s AND g.accepted{}
                        ORDER BY d.doc_order, d.doc_key, d.chunk_index, g.pass, g.id""").format(
                cols, qualified(realm, "gate_decisions"), qualified(realm, "documents"), where
            ),
            (space, kind) if kind is not None else (space,),
        )
        while rows := cur.fetchmany(batch):
            yield pl.DataFrame(rows, schema=DECISION_SCHEMA, orient="row")


def replace_resolution_rejections(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    rejections: pl.DataFrame,
    chunk_ids: Sequence[int] | None = None,
) -> int:
    """Replace the space's post-resolution rejections (chunk_id, subject, predicate, object, gate,
    offending_value) — all of them, or those of ``chunk_ids`` (an incremental run: ``rejections`` then holds
    only theirs); an identical set is left as it is. Returns the number of rows written or kept."""
    table = qualified(realm, "resolution_rejections")
    cols = ["chunk_id", "subject", "predicate", "object", "gate", "offending_value"]
    only = sql.SQL("") if chunk_ids is None else sql.SQL(" AND chunk_id = ANY(%s)")
    args = (space,) if chunk_ids is None else (space, list(chunk_ids))
    stored = sorted(
        conn.execute(
            sql.SQL(
                "SELECT chunk_id, subject, predicate, object, gate, offending_value FROM {}"
                " WHERE space = %s{}"
            ).format(table, only),
            args,
        ).fetchall()
    )
    wanted = sorted(rejections.select(cols).iter_rows())
    if stored != wanted:
        conn.execute(sql.SQL("DELETE FROM {} WHERE space = %s{}").format(table, only), args)
        with conn.cursor() as cur:
            cur.executemany(
                sql.SQL(
                    "INSERT INTO {} (space, chunk_id, subject, predicate, object, gate, offending_value)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s)"
                ).format(table),
                [(space, *r) for r in wanted],
            )
    return len(wanted)


def rejection_endpoints(conn: psycopg.Connection, realm: str, space: str) -> list[tuple[int, str, str]]:
    """(chunk_id, subject, object) of every post-resolution rejection (self-loop) of the space: the triples
    no edge holds, which a change of entity forms may turn into edges (issue 15)."""
    return conn.execute(
        sql.SQL("SELECT chunk_id, subject, object FROM {} WHERE space = %s").format(
            qualified(realm, "resolution_rejections")
        ),
        (space,),
    ).fetchall()
