"""Incremental indexing gives the graph a full recompute gives (issue 15 item 1).

Two realms index the same sequence of source changes — documents added (one that shifts every other
document's order), changed, deleted, an unchanged re-run, a vocabulary change — from real prose (the
opening of *The Three Musketeers*, ../shared/corpora/dumas). Realm ``inc`` runs the stages as they run
by default (on what changed); realm ``full`` recomputes every stage over the whole space each time
(``index_documents(full=True)``). After every step their content dumps — gate decisions, entities,
mentions, relations with their support, supersession and dormancy, post-resolution rejections — are
equal, ids aside. The "model" is the stub server reached through litellm: per chunk, the offline
extractor's names (last word of a person-like name as its alias) and a triple between neighbouring names
whose predicate is chosen from the narrative preset's exclusive group by a hash of the chunk, so later
documents supersede earlier ones, with negations and validity years.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg import sql

from pgrag_dag.config import load_settings
from pgrag_dag.engine import Engine
from pgrag_dag.extract.cooccurrence import CooccurrenceOptions, extract_chunk_cooccurrence
from pgrag_dag.pipeline import StageResult, index_documents
from pgrag_dag.store import db, schema, tallies
from pgrag_dag.testing.stub_server import StubServer
from tests.fix_corpus import SHARED_CORPORA

MUSKETEERS = SHARED_CORPORA / "dumas" / "01_the_three_musketeers_pg1257.txt"
CHUNK = re.compile(r"<<<CHUNK\n(.*)\nCHUNK>>>", re.DOTALL)
GROUP = ("ally_of", "enemy_of", "friend_of", "rival_of")
OTHER = ("serves", "met", "lives_in")
YEAR = re.compile(r"\b(1[5-7]\d\d)\b")


def _h(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("|".join(parts).encode()).digest()[:8], "big")


def _ent(name: str, *aliases: str) -> dict[str, Any]:
    return {"name": name, "type": "Person", "description": "", "aliases": list(aliases)}


def _tri(s: str, p: str, o: str) -> dict[str, Any]:
    return {
        "subject": s,
        "predicate": p,
        "object": o,
        "negated": False,
        "confidence": 0.9,
        "description": f"{s} {p} {o}",
        "valid_from": None,
        "valid_to": None,
    }


# Scripted chunks for the one case prose rarely shows: a stored vertex gains, as an alias, a form a later
# vertex held ("Milady"), so triples and mentions by that form elsewhere resolve to it now (lowest id first).
SCRIPT = {
    "Anne de Breuil met Athos at Berry.": {
        "entities": [_ent("Anne de Breuil"), _ent("Athos")],
        "triples": [_tri("Anne de Breuil", "met", "Athos")],
    },
    "Lady de Winter, called Milady, is the enemy of d'Artagnan.": {
        "entities": [_ent("Lady de Winter", "Milady"), _ent("Milady"), _ent("d'Artagnan")],
        "triples": [_tri("Milady", "enemy_of", "d'Artagnan")],
    },
    "Anne de Breuil was Milady all along.": {"entities": [_ent("Anne de Breuil", "Milady")], "triples": []},
    # and the merge (§4.6, issue 28): two stored vertices, one gaining the other's canonical name as an alias
    "The Comte de La Fère kept a secret.": {"entities": [_ent("Comte de La Fère")], "triples": []},
    "Athos was the Comte de La Fère.": {"entities": [_ent("Comte de La Fère", "Athos")], "triples": []},
}


def answer(messages: list[dict[str, str]]) -> str:
    """The stub "model": see the module docstring. Gleaning prompts get nothing more."""
    user = messages[-1]["content"]
    if user.startswith("Some entities"):
        return '{"entities": [], "triples": []}'
    text = CHUNK.search(user).group(1)  # type: ignore[union-attr]
    if text.strip() in SCRIPT:
        return json.dumps(SCRIPT[text.strip()])
    found = extract_chunk_cooccurrence(text, "", CooccurrenceOptions())
    names = [e["name"] for e in found["entities"]][:12]
    entities = [
        {
            "name": n,
            "type": "Person",
            "description": f"{n} in: {text[:60]}",
            "aliases": [n.split()[-1]] if 2 <= len(n.split()) <= 3 and n.split()[-1][:1].isupper() else [],
        }
        for n in names
    ]
    triples = []
    for a, b in zip(names, names[1:]):
        h = _h(a, b, text[:80])
        pred = GROUP[h % len(GROUP)] if h % 3 else OTHER[h % len(OTHER)]
        year = YEAR.search(text)
        triples.append(
            {
                "subject": a,
                "predicate": pred,
                "object": b,
                "negated": (h >> 9) % 7 == 0,
                "confidence": 0.9,
                "description": f"{a} {pred} {b}",
                "valid_from": year.group(1) if year and h % 2 else None,
                "valid_to": None,
            }
        )
    return json.dumps({"entities": entities, "triples": triples})


def _paragraphs() -> list[str]:
    """Prose paragraphs of the novel's first chapters (Gutenberg header skipped)."""
    text = MUSKETEERS.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
    body = text[text.index("AUTHOR’S PREFACE", text.index("THE RETURN")) :]
    paras = [" ".join(p.split()) for p in body.split("\n\n")]
    return [p for p in paras if len(p) > 300][40:64]


@pytest.fixture
def twins(tmp_path: Path, pg_dsn: str) -> Iterator[tuple[Path, dict[str, Engine], dict[str, str]]]:
    """One source folder, two realms over it (``inc`` and ``full``), one stub server."""
    if not MUSKETEERS.exists():
        pytest.skip(f"{MUSKETEERS} is not here (../shared/corpora)")
    (tmp_path / "docs").mkdir()
    tag = uuid.uuid4().hex[:6]
    realms = {"inc": f"tinc_{tag}", "full": f"tfull_{tag}"}
    with StubServer(answer) as server:
        engines = {}
        for kind, realm in realms.items():
            cfg = {
                "database_url": pg_dsn,
                "data_dir": str(tmp_path / "data"),
                "llm": {
                    "models": [f"openai/inc-{tag}"],
                    "api_base": server.base_url,
                    "api_key": "x",
                    "deadline_s": 10,
                    "max_retries": 0,
                },
                "embedding": {"model": "hashing-sha256", "dim": 64},
                "chunking": {"chunk_chars": 700, "overlap_chars": 100},
                "extraction": {"gleaning_passes": 0},
                "realms": {
                    realm: {
                        "spaces": {
                            "books": {
                                "preset": "narrative",
                                "order": "listed",
                                "sources": [
                                    {"path": "docs", "glob": "0*.txt"},
                                    {"path": "docs", "glob": "1*.txt"},
                                ],
                            }
                        }
                    }
                },
            }
            (tmp_path / f"{kind}.yaml").write_text(yaml.safe_dump(cfg))
            engines[kind] = Engine.from_settings(load_settings(tmp_path / f"{kind}.yaml"))
        yield tmp_path, engines, realms
        for engine in engines.values():
            engine.close()
        with db.connect(pg_dsn, autocommit=True) as conn:
            for realm in realms.values():
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                        sql.Identifier(schema.schema_for(realm))
                    )
                )
                conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (realm,))


DUMP = {
    "decisions": """SELECT d.doc_key, d.chunk_index, g.pass, g.kind, g.name, g.entity_type, g.aliases,
                           g.subject, g.predicate, g.object, g.negated, g.valid_from, g.accepted, g.gate,
                           g.offending_value
                      FROM {s}.gate_decisions g JOIN {s}.documents d ON d.id = g.chunk_id""",
    "entities": """SELECT e.name, e.entity_type, e.description, e.aliases, e.dormant_since IS NOT NULL,
                          m.name FROM {s}.entities e LEFT JOIN {s}.entities m ON m.id = e.merged_into""",
    "mentions": """SELECT d.doc_key, d.chunk_index, e.name FROM {s}.doc_mentions m
                      JOIN {s}.documents d ON d.id = m.chunk_id JOIN {s}.entities e ON e.id = m.entity_id""",
    "relations": """SELECT s.name, r.predicate, o.name, r.negated, r.description, r.weight, r.confidence,
                           r.payload::text,
                           r.rendered, r.dormant_since IS NOT NULL, r.t_expired IS NOT NULL,
                           (SELECT ss.name || ' ' || sup.predicate || ' ' || so.name || ' ' || sup.negated
                              FROM {s}.relations sup JOIN {s}.entities ss ON ss.id = sup.source_id
                              JOIN {s}.entities so ON so.id = sup.target_id WHERE sup.id = r.superseded_by),
                           (SELECT array_agg(d.doc_key || '#' || d.chunk_index ORDER BY d.doc_key,
                           d.chunk_index)
                              FROM {s}.documents d WHERE d.id = ANY(r.chunk_ids))
                      FROM {s}.relations r JOIN {s}.entities s ON s.id = r.source_id
                      JOIN {s}.entities o ON o.id = r.target_id""",
    "rejections": """SELECT d.doc_key, d.chunk_index, x.subject, x.predicate, x.object, x.gate,
                       x.offending_value
                       FROM {s}.resolution_rejections x JOIN {s}.documents d ON d.id = x.chunk_id""",
}


def _dump(engine: Engine, realm: str) -> dict[str, list[tuple[Any, ...]]]:
    s = sql.Identifier(schema.schema_for(realm))
    with engine.connect() as conn:
        return {k: sorted(conn.execute(sql.SQL(q).format(s=s)).fetchall(), key=repr) for k, q in DUMP.items()}


def _step(engines: dict[str, Engine], realms: dict[str, str]) -> dict[str, dict[str, StageResult]]:
    out = {}
    for kind in ("inc", "full"):
        results = index_documents(
            engines[kind], realms[kind], "books", communities=False, full=kind == "full"
        )
        out[kind] = {r.stage: r for r in results}
    a, b = _dump(engines["inc"], realms["inc"]), _dump(engines["full"], realms["full"])
    for table in DUMP:
        if a[table] != b[table]:
            only_a, only_b = (
                set(map(repr, a[table])) - set(map(repr, b[table])),
                set(map(repr, b[table])) - set(map(repr, a[table])),
            )
            raise AssertionError(
                f"{table}: incremental only {sorted(only_a)[:4]}; full only {sorted(only_b)[:4]}"
            )
    assert a["relations"] and a["entities"] and a["mentions"]
    # the counts kept by delta (issue 30) are what a recount finds, and what the full run reports
    for kind in ("inc", "full"):
        with engines[kind].connect() as conn:
            kept = tallies.read(conn, realms[kind], "books")
            assert kept == tallies.recount(conn, realms[kind], "books"), kind
    assert {k: out["inc"]["relations"].metadata[k] for k in tallies.KEYS} == {
        k: out["full"]["relations"].metadata[k] for k in tallies.KEYS
    }
    assert kept["relations"] and kept["mentions"]
    # the incremental graph-quality check (orphans kept by delta) measures what the full one measures
    quality = {k: out[k]["relations"].checks["graph_quality"][1] for k in out}
    assert {k: quality["inc"][k] for k in quality["full"] if k != "extractor"} == {
        k: quality["full"][k] for k in quality["full"] if k != "extractor"
    }
    return out


def _met(conn: psycopg.Connection, s: sql.Identifier) -> list[tuple[Any, ...]]:
    """Whom Anne de Breuil's live ``met`` edge (its document "Anne de Breuil met Athos at Berry.") ends at."""
    return conn.execute(
        sql.SQL("""SELECT o.name FROM {s}.relations r JOIN {s}.entities o ON o.id = r.target_id
                    WHERE r.predicate = 'met' AND r.dormant_since IS NULL
                      AND r.rendered LIKE 'Anne de Breuil met %%'""").format(s=s)
    ).fetchall()


def _configure(root: Path, engines: dict[str, Engine], realms: dict[str, str], edit: Any) -> None:
    """Apply ``edit`` to the space's configuration of both realms and reload their engines."""
    for kind in ("inc", "full"):
        cfg = yaml.safe_load((root / f"{kind}.yaml").read_text())
        edit(cfg["realms"][realms[kind]]["spaces"]["books"])
        (root / f"{kind}.yaml").write_text(yaml.safe_dump(cfg))
        engines[kind].close()
        engines[kind] = Engine.from_settings(load_settings(root / f"{kind}.yaml"))


def test_incremental_indexing_gives_the_full_recompute_graph_over_adds_changes_and_deletes(twins) -> None:  # type: ignore[no-untyped-def]
    root, engines, realms = twins
    paras = _paragraphs()
    docs = {f"{i + 10:02d}_chapter.txt": "\n\n".join(paras[3 * i : 3 * i + 3]) for i in range(6)}
    docs["01_berry.txt"], docs["02_winter.txt"], docs["03_count.txt"] = list(SCRIPT)[:2] + list(SCRIPT)[3:4]
    for name, text in docs.items():
        (root / "docs" / name).write_text(text)
    first = _step(engines, realms)["inc"]
    assert first["relations"].metadata["mode"] == "full"  # a new space: the first run covers everything

    (root / "docs" / "16_chapter.txt").write_text("\n\n".join(paras[18:21]))  # one document added
    added = _step(engines, realms)["inc"]

    (root / "docs" / "17_secret.txt").write_text(list(SCRIPT)[2])  # "Milady" now resolves to Anne de Breuil
    _step(engines, realms)
    with engines["inc"].connect() as conn:
        owner = conn.execute(
            sql.SQL("""SELECT s.name FROM {s}.relations r JOIN {s}.entities s ON s.id = r.source_id
                                         WHERE r.predicate = 'enemy_of' AND r.dormant_since IS NULL
                                         AND r.rendered LIKE
                                         '%% enemy_of d''Artagnan: Milady%%'""").format(
                s=sql.Identifier(schema.schema_for(realms["inc"]))
            )
        ).fetchall()
    assert owner == [("Anne de Breuil",)]

    (root / "docs" / "18_athos.txt").write_text(list(SCRIPT)[4])  # "Athos" merges into the Comte de La Fère
    merged = _step(engines, realms)
    assert {k: merged[k]["resolved_entities"].metadata["entities_merged"] for k in merged} == {
        "inc": 1,
        "full": 1,
    }
    with engines["inc"].connect() as conn:
        s = sql.Identifier(schema.schema_for(realms["inc"]))
        fragment = conn.execute(
            sql.SQL("""SELECT m.name, e.dormant_since IS NOT NULL,
                              (SELECT count(*) FROM {s}.doc_mentions d WHERE d.entity_id = e.id),
                              (SELECT count(*) FROM {s}.relations r WHERE r.dormant_since IS NULL
                                  AND e.id IN (r.source_id, r.target_id))
                         FROM {s}.entities e JOIN {s}.entities m ON m.id = e.merged_into
                        WHERE e.name = 'Athos'""").format(s=s)
        ).fetchall()
        met = _met(conn, s)
    assert fragment == [("Comte de La Fère", True, 0, 0)]  # history only: no mention, no live edge
    assert met == [("Comte de La Fère",)]  # its edges moved to the survivor

    (root / "docs" / "18_athos.txt").unlink()  # the merge's only evidence leaves: two vertices again
    unmerged = _step(engines, realms)
    assert {k: unmerged[k]["resolved_entities"].metadata["entities_split"] for k in unmerged} == {
        "inc": 2,
        "full": 2,
    }
    with engines["inc"].connect() as conn:
        athos = conn.execute(
            sql.SQL("""SELECT e.merged_into, e.dormant_since IS NULL, c.aliases
                         FROM {s}.entities e, {s}.entities c
                        WHERE e.name = 'Athos' AND c.name = 'Comte de La Fère'""").format(s=s)
        ).fetchall()
        met = _met(conn, s)
    assert athos == [(None, True, [])]  # a vertex again, live; the survivor holds no form of it
    assert met == [("Athos",)]  # and its edge is back
    assert added["gated_triples"].metadata["mode"] == added["relations"].metadata["mode"] == "incremental"
    assert 0 < added["relations"].metadata["pairs_rebuilt"] < added["relations"].metadata["relations"]
    assert added["gated_triples"].metadata["chunks_gated"] < first["gated_triples"].metadata["chunks_gated"]

    (root / "docs" / "05_preface.txt").write_text(
        "\n\n".join(paras[21:23])
    )  # listed before the chapters: they shift
    _step(engines, realms)

    (root / "docs" / "12_chapter.txt").write_text(docs["12_chapter.txt"] + "\n\n" + paras[23])  # one changed
    changed = _step(engines, realms)["inc"]
    assert changed["chunks"].metadata["documents_replaced"] == 1

    (root / "docs" / "11_chapter.txt").unlink()  # one deleted: its only facts go dormant
    deleted = _step(engines, realms)["inc"]
    assert deleted["chunks"].metadata["documents_removed"] == 1
    assert (
        deleted["resolved_entities"].metadata["dormant"]
        + deleted["relations"].metadata["relations_newly_dormant"]
        > 0
    )

    _configure(root, engines, realms, lambda books: books.update(sources=books["sources"][::-1]))
    reordered = _step(engines, realms)[
        "inc"
    ]  # the 0* documents now come last: later assertions win elsewhere
    assert (
        reordered["relations"].metadata["mode"] == "incremental"
        and reordered["chunks"].metadata["rows_changed"]
    )

    before = {r.stage: r.data_version for r in reordered.values()}
    again = _step(engines, realms)["inc"]  # nothing changed: nothing written, the same data versions
    assert {again[s].metadata["mode"] for s in ("gated_triples", "resolved_entities", "relations")} == {
        "unchanged"
    }
    assert {r.stage: r.data_version for r in again.values()} == before
    assert all(r.metadata.get("rows_changed", 0) == 0 for r in again.values()), {
        s: r.metadata.get("rows_changed") for s, r in again.items()
    }
    assert again["relations"].metadata["mode"] == "unchanged"

    # a vocabulary change: the relations stage recomputes the space by itself
    _configure(root, engines, realms, lambda books: books.update(exclusive_groups=[["serves", "met"]]))
    regrouped = _step(engines, realms)["inc"]
    assert regrouped["relations"].metadata["mode"] == "full"
    assert regrouped["gated_triples"].metadata["mode"] == "full"  # the vocabulary is the gates' input too
