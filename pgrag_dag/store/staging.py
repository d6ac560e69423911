"""SQL for the staging tables: ``raw_extractions`` and ``gate_decisions``.

Raw extractions are kept, so changing a gate re-materialises ``gated_triples`` and everything
downstream with zero model calls.
"""

from __future__ import annotations

import json

import polars as pl
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgrag_dag.extraction import RAW_SCHEMA
from pgrag_dag.gates import DECISION_SCHEMA
from pgrag_dag.store.schema import qualified as _t


def chunks_needing_extraction(conn: psycopg.Connection, realm: str, space: str, *, extractor: str) -> pl.DataFrame:
    """Chunks with no successful first pass by ``extractor`` (an extractor identity, stored in
    ``prompt_version``): new, changed, failed before, or extracted by another extractor — in document
    order: chunk_id, doc_key, chunk_index, title, source, text."""
    rows = conn.execute(
        sql.SQL("""SELECT d.id, d.doc_key, d.chunk_index, d.title, d.source, d.text FROM {d} d
                    WHERE d.space = %s AND NOT EXISTS (
                          SELECT 1 FROM {r} r WHERE r.chunk_id = d.id AND r.pass = 0 AND r.parse_status = 'ok'
                             AND r.prompt_version = %s)
                    ORDER BY d.doc_order, d.doc_key, d.chunk_index""").format(
            d=_t(realm, "documents"), r=_t(realm, "raw_extractions")),
        (space, extractor),
    ).fetchall()
    schema = {"chunk_id": pl.Int64, "doc_key": pl.String, "chunk_index": pl.Int64, "title": pl.String,
              "source": pl.String, "text": pl.String}
    return pl.DataFrame(rows, schema=schema, orient="row")


def document_names(conn: psycopg.Connection, realm: str, space: str, doc_keys: list[str], *,
                   extractor: str) -> dict[str, list[tuple[int, list[str]]]]:
    """For each document, (chunk_index, entity names) of its stored successful extractions by
    ``extractor`` (an extractor identity), in document order — the seed of the document context
    (§4.1) when part of a document is extracted again. Another extractor's names never seed it."""
    rows = conn.execute(
        sql.SQL("""SELECT d.doc_key, d.chunk_index, r.parsed FROM {r} r JOIN {d} d ON d.id = r.chunk_id
                    WHERE r.space = %s AND d.doc_key = ANY(%s) AND r.parse_status = 'ok' AND r.prompt_version = %s
                    ORDER BY d.doc_key, d.chunk_index, r.pass""").format(r=_t(realm, "raw_extractions"), d=_t(realm, "documents")),
        (space, doc_keys, extractor),
    ).fetchall()
    out: dict[str, list[tuple[int, list[str]]]] = {}
    for doc_key, chunk_index, parsed in rows:
        names = [e.get("name") for e in parsed.get("entities", []) if isinstance(e.get("name"), str)]
        out.setdefault(doc_key, []).append((chunk_index, names))
    return out


def write_raw(conn: psycopg.Connection, realm: str, space: str, raw: pl.DataFrame) -> int:
    """Replace the raw rows of the chunks in ``raw`` (the ``raw_extractions`` frame) with ``raw``."""
    if raw.height == 0:
        return 0
    chunk_ids = sorted(set(raw["chunk_id"].to_list()))
    conn.execute(sql.SQL("DELETE FROM {} WHERE chunk_id = ANY(%s)").format(_t(realm, "raw_extractions")), (chunk_ids,))
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL("""INSERT INTO {} (space, chunk_id, pass, model, prompt_version, raw_text, parsed, parse_status,
                                      error, prompt_tokens, completion_tokens, cache_hit)
                       VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)""").format(_t(realm, "raw_extractions")),
            [(space, r["chunk_id"], r["pass"], r["model"], r["prompt_version"], r["raw_text"],
              Jsonb(json.loads(r["parsed"])) if r["parsed"] else None, r["parse_status"], r["error"],
              r["prompt_tokens"], r["completion_tokens"], r["cache_hit"]) for r in raw.iter_rows(named=True)],
        )
    return raw.height


def load_raw(conn: psycopg.Connection, realm: str, space: str) -> pl.DataFrame:
    """Every raw extraction row of the space (the ``raw_extractions`` frame), in document order then pass."""
    rows = conn.execute(
        sql.SQL("""SELECT r.chunk_id, r.pass, r.model, r.prompt_version, r.raw_text, r.parsed::text, r.parse_status,
                          r.error, r.prompt_tokens, r.completion_tokens, r.cache_hit
                     FROM {r} r JOIN {d} d ON d.id = r.chunk_id WHERE r.space = %s
                    ORDER BY d.doc_order, d.doc_key, d.chunk_index, r.pass""")
        .format(r=_t(realm, "raw_extractions"), d=_t(realm, "documents")), (space,),
    ).fetchall()
    return pl.DataFrame(rows, schema=RAW_SCHEMA, orient="row")


_DECISION_COLS = [c for c in DECISION_SCHEMA]


def replace_decisions(conn: psycopg.Connection, realm: str, space: str, decisions: pl.DataFrame) -> int:
    """Replace the space's gate decisions with ``decisions`` (the ``gate_decisions`` frame)."""
    conn.execute(sql.SQL("DELETE FROM {} WHERE space = %s").format(_t(realm, "gate_decisions")), (space,))
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in ["space", *_DECISION_COLS])
    with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(_t(realm, "gate_decisions"), cols)) as copy:
        for r in decisions.iter_rows(named=True):
            copy.write_row((space, *[r[c] for c in _DECISION_COLS]))
    return decisions.height


def load_decisions(conn: psycopg.Connection, realm: str, space: str, *, accepted_only: bool = True) -> pl.DataFrame:
    """The space's gate decisions (the ``gate_decisions`` frame) in document order (document, chunk, pass)."""
    cols = sql.SQL(", ").join(sql.Identifier("g", c) for c in _DECISION_COLS)
    where = sql.SQL(" AND g.accepted") if accepted_only else sql.SQL("")
    rows = conn.execute(
        sql.SQL("""SELECT {} FROM {} g JOIN {} d ON d.id = g.chunk_id WHERE g.space = %s{}
                    ORDER BY d.doc_order, d.doc_key, d.chunk_index, g.pass, g.id""").format(
            cols, _t(realm, "gate_decisions"), _t(realm, "documents"), where),
        (space,),
    ).fetchall()
    return pl.DataFrame(rows, schema=DECISION_SCHEMA, orient="row")


def replace_resolution_rejections(conn: psycopg.Connection, realm: str, space: str, rejections: pl.DataFrame) -> int:
    """Replace the space's post-resolution rejections (chunk_id, subject, predicate, object, gate,
    offending_value); an identical set is left as it is. Returns the number of rows."""
    table = _t(realm, "resolution_rejections")
    cols = ["chunk_id", "subject", "predicate", "object", "gate", "offending_value"]
    stored = conn.execute(sql.SQL("SELECT chunk_id, subject, predicate, object, gate, offending_value FROM {}"
                                  " WHERE space = %s ORDER BY 1, 2, 3, 4").format(table), (space,)).fetchall()
    wanted = sorted(rejections.select(cols).iter_rows())
    if stored != wanted:
        conn.execute(sql.SQL("DELETE FROM {} WHERE space = %s").format(table), (space,))
        with conn.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} (space, chunk_id, subject, predicate, object, gate, offending_value)"
                                    " VALUES (%s, %s, %s, %s, %s, %s, %s)").format(table), [(space, *r) for r in wanted])
    return len(wanted)
