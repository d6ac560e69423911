"""Operations around the index (issue 11): a second run of a partition, an empty configuration, database
errors, and refreshes beside live queries — on real PostgreSQL with real litellm calls to the stub."""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg import sql

from pgrag_dag.errors import ConfigurationError, DatabaseError, PartitionBusyError
from pgrag_dag.pipeline import index_documents, stage_chunks, stage_gated_triples
from pgrag_dag.query import QueryParam, query_data
from pgrag_dag.store import db, locks
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus


def _count(dsn: str, realm: str, table: str, space: str) -> int:
    with db.connect(dsn) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.{} WHERE space = %s").format(
                sql.Identifier(schema_for(realm)), sql.Identifier(table)
            ),
            (space,),
        ).fetchone()
        return int(row[0])


def _with_spaces(corpus: SmallCorpus, realm: str, spaces: list[str], **space_extra: Any) -> None:
    """Rewrite the fixture's configuration to declare ``spaces`` over the same documents."""
    cfg = yaml.safe_load(corpus.config.read_text())
    spec = {"sources": [{"path": "docs", "glob": "*.txt"}], **space_extra}
    cfg["realms"] = {realm: {"spaces": {s: dict(spec) for s in spaces}}}
    corpus.config.write_text(yaml.safe_dump(cfg))


def _snapshot(dsn: str, realm: str, space: str) -> dict[str, Any]:
    """The space's index without ids or timestamps: what two equal runs must agree on."""
    s = sql.Identifier(schema_for(realm))
    queries = {
        "chunks": "SELECT doc_key, chunk_index, content_hash FROM {s}.documents WHERE space = %s",
        "raw": "SELECT d.doc_key, d.chunk_index, r.pass, r.parse_status FROM {s}.raw_extractions r "
        "JOIN {s}.documents d ON d.id = r.chunk_id WHERE r.space = %s",
        "decisions": "SELECT kind, coalesce(name, subject || ' ' || predicate || ' ' || object), "
        "accepted, gate "
        "FROM {s}.gate_decisions WHERE space = %s",
        "entities": "SELECT name, entity_type, dormant_since IS NULL FROM {s}.entities WHERE space = %s",
        "relations": "SELECT a.name, r.predicate, b.name, r.negated, r.weight, r.superseded_by IS NULL "
        "FROM {s}.relations r "
        "JOIN {s}.entities a ON a.id = r.source_id "
        "JOIN {s}.entities b ON b.id = r.target_id WHERE r.space = %s",
        "communities": "SELECT level, title, size FROM {s}.communities WHERE space = %s",
    }
    with db.connect(dsn) as conn:
        return {
            k: sorted(conn.execute(sql.SQL(q).format(s=s), (space,)).fetchall()) for k, q in queries.items()
        }


# -- a second run of one partition ------------------------------------------------------------------
def test_a_second_run_of_a_partition_is_refused_naming_the_holder(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine(operations={"lock_wait_s": 0.5})
    with locks.stage_lock(engine.dsn, realm, "main", "raw_extractions", wait_s=0):  # "another run" holds it
        t0 = time.monotonic()
        with pytest.raises(PartitionBusyError) as err:
            stage_chunks(engine, realm, "main")
        waited = time.monotonic() - t0
    msg = str(err.value)
    assert 0.45 <= waited < 5
    assert err.value.partition == f"{realm}.main" and "\n" not in msg
    assert f"partition {realm}.main is being written by another run" in msg
    assert "pgrag raw_extractions pid" in msg and "PostgreSQL backend" in msg
    assert _count(engine.dsn, realm, "documents", "main") == 0  # nothing written


def test_a_second_run_waits_for_the_first_within_the_configured_wait(
    small_corpus: SmallCorpus, realm: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = small_corpus.engine(operations={"lock_wait_s": 30})
    held = threading.Event()

    def other_run() -> None:
        with locks.stage_lock(engine.dsn, realm, "main", "chunks", wait_s=0):
            held.set()
            time.sleep(1.0)

    t = threading.Thread(target=other_run, daemon=True)
    t.start()
    held.wait(5)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="pgrag_dag.store.locks"):
        result = stage_chunks(engine, realm, "main")
    t.join()
    assert time.monotonic() - t0 >= 0.8  # it waited for the holder, then ran
    assert result.metadata["documents_added"] == 2
    said = [r.getMessage() for r in caplog.records if r.name == "pgrag_dag.store.locks"]
    assert len(said) == 1 and said[0].startswith(
        f"{realm}.main: the chunks stage waits up to 30 s "
        "(operations.lock_wait_s) for another run of the space to finish: "
    )
    assert "pgrag chunks pid" in said[0]  # who holds it


@pytest.mark.slow
def test_two_runs_of_one_partition_at_once_equal_one_run(small_corpus: SmallCorpus, realm: str) -> None:
    """Issue 11: two runs of one partition failed in 19 of 20 repeats (UniqueViolation, a deadlock, doubled
    gate decisions). Now the second waits stage by stage and finds its work done: 10 of 10 equal one run,
    with the model calls of one run."""
    reps = 10
    _with_spaces(small_corpus, realm, ["ref", *[f"s{i}" for i in range(reps)]])
    index_documents(small_corpus.engine(), realm, "ref")
    reference = _snapshot(small_corpus.engine().dsn, realm, "ref")
    assert reference["relations"] and reference["communities"]
    for i in range(reps):
        space, errors = f"s{i}", []
        before = len(small_corpus.chat_requests())
        start = threading.Barrier(2, timeout=60)  # a run failing early never strands the other

        def run(
            start: threading.Barrier = start, space: str = space, errors: list[BaseException] = errors
        ) -> None:
            engine = small_corpus.engine()
            try:
                start.wait()
                index_documents(engine, realm, space)
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)
            finally:
                engine.close()

        threads = [threading.Thread(target=run, daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == [], f"repetition {i}: {errors}"
        assert _snapshot(small_corpus.engine().dsn, realm, space) == reference, f"repetition {i}"
        # every prompt is cached from the reference run: neither run called the model
        assert len(small_corpus.chat_requests()) == before


# -- a configuration that would remove every document ---------------------------------------------
def test_empty_sources_are_refused_for_an_indexed_space_unless_allowed(
    small_corpus: SmallCorpus, realm: str
) -> None:
    index_documents(small_corpus.engine(), realm, "main", communities=False)
    entities = _count(small_corpus.engine().dsn, realm, "entities", "main")
    cfg = yaml.safe_load(small_corpus.config.read_text())
    cfg["realms"][realm]["spaces"]["main"]["sources"] = []
    small_corpus.config.write_text(yaml.safe_dump(cfg))
    with pytest.raises(
        ConfigurationError, match=r"sources name no document, but it holds 2 indexed document\(s\)"
    ):
        stage_chunks(small_corpus.engine(), realm, "main")
    assert _count(small_corpus.engine().dsn, realm, "documents", "main") > 0
    assert _count(small_corpus.engine().dsn, realm, "raw_extractions", "main") > 0
    # removing some documents stays normal
    cfg["realms"][realm]["spaces"]["main"]["sources"] = [{"path": "docs", "glob": "01_*.txt"}]
    small_corpus.config.write_text(yaml.safe_dump(cfg))
    assert stage_chunks(small_corpus.engine(), realm, "main").metadata["documents_removed"] == 1
    # a glob that now matches nothing is refused too; the explicit setting removes everything
    cfg["realms"][realm]["spaces"]["main"]["sources"] = [{"path": "docs", "glob": "*.md"}]
    small_corpus.config.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigurationError, match="matches no file"):
        stage_chunks(small_corpus.engine(), realm, "main")
    result = index_documents(
        small_corpus.engine(operations={"allow_empty": True}), realm, "main", communities=False
    )
    assert result[0].metadata["documents_removed"] == 1
    assert _count(small_corpus.engine().dsn, realm, "documents", "main") == 0
    assert _count(small_corpus.engine().dsn, realm, "entities", "main") == entities  # dormant, never deleted


def test_a_source_whose_last_file_was_deleted_removes_its_documents_beside_the_other_sources(
    small_corpus: SmallCorpus, realm: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The layout ``pgrag init`` writes, one source per kind of document: deleting the only ``.md`` file is a
    deletion like any other, not a configuration error (a fresh user's report)."""
    note = small_corpus.root / "docs" / "note.md"
    note.write_text("Mary Somerville met Charles Babbage in London.\n", encoding="utf-8")
    cfg = yaml.safe_load(small_corpus.config.read_text())
    cfg["realms"][realm]["spaces"]["main"]["sources"] = [
        {"path": "docs", "glob": "*.txt"},
        {"path": "docs", "glob": "*.md"},
    ]
    small_corpus.config.write_text(yaml.safe_dump(cfg))
    assert stage_chunks(small_corpus.engine(), realm, "main").metadata["documents"] == 3
    note.unlink()
    with caplog.at_level(logging.WARNING, logger="pgrag_dag.pipeline"):
        done = stage_chunks(small_corpus.engine(), realm, "main")
    assert done.metadata["documents_removed"] == 1 and done.metadata["documents"] == 2
    assert any(
        "matches no file for glob '*.md'" in r.getMessage()
        and "any it named before leaves the index" in r.getMessage()
        for r in caplog.records
    )
    # a registered file since deleted is refused, saying to take the source out of the configuration
    cfg["realms"][realm]["spaces"]["main"]["sources"].append({"path": "docs/gone.md"})
    small_corpus.config.write_text(yaml.safe_dump(cfg))
    with pytest.raises(
        ConfigurationError,
        match=r"gone\.md does not exist; if it was removed on purpose, take the "
        r"source out of the configuration",
    ):
        stage_chunks(small_corpus.engine(), realm, "main")
    cfg["realms"][realm]["spaces"]["main"]["sources"].pop()
    small_corpus.config.write_text(yaml.safe_dump(cfg))
    # every source naming nothing is still refused, saying how to remove the documents on purpose
    for f in (small_corpus.root / "docs").glob("*.txt"):
        f.rename(f.with_suffix(".bak"))
    with pytest.raises(
        ConfigurationError, match=r"matches no file for glob '\*\.txt'.*pgrag index --allow-empty"
    ):
        stage_chunks(small_corpus.engine(), realm, "main")
    assert _count(small_corpus.engine().dsn, realm, "documents", "main") > 0


def test_a_database_error_inside_a_stage_is_a_one_line_database_error(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    stage_chunks(engine, realm, "main")
    with db.connect(engine.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER TABLE {}.gate_decisions RENAME TO gate_decisions_gone").format(
                sql.Identifier(schema_for(realm))
            )
        )
    with pytest.raises(DatabaseError) as err:
        stage_gated_triples(engine, realm, "main")
    assert "UndefinedTable" in str(err.value) and "\n" not in str(err.value)
    assert "password" not in str(err.value)


# -- refreshes beside live queries ------------------------------------------------------------------
@pytest.mark.slow
def test_queries_beside_repeated_reindexing_of_two_spaces_never_fail(
    small_corpus: SmallCorpus, realm: str
) -> None:
    """Issue 11: re-indexing ran DDL on every run; its ACCESS EXCLUSIVE locks deadlocked live queries
    (4–8 of 800 died, stalls up to 19 s). Now 4 query threads beside 3 rounds of re-indexing two
    spaces of one realm at once see no error, and no query waits long."""
    _with_spaces(small_corpus, realm, ["alpha", "beta"])
    for space in ("alpha", "beta"):
        index_documents(small_corpus.engine(), realm, space)
    engine = small_corpus.engine()
    stop, errors, latencies = threading.Event(), [], []

    def ask(space: str) -> None:
        questions = [
            "Who designed the Analytical Engine?",
            "What did Ada Lovelace write?",
            "Who funded the engine?",
        ]
        n = 0
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                res = query_data(
                    questions[n % 3],
                    QueryParam(space=space, keywords="lexical"),
                    dsn=engine.dsn,
                    realm=realm,
                    embedder=engine.embedder(),
                )
                assert res.entities or res.chunks
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)
            latencies.append(time.monotonic() - t0)
            n += 1

    def refresh(space: str) -> None:
        try:
            index_documents(small_corpus.engine(), realm, space)
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    readers = [
        threading.Thread(target=ask, args=(s,), daemon=True) for s in ("alpha", "beta", "alpha", "beta")
    ]
    for t in readers:
        t.start()
    try:
        for round_ in range(3):
            doc = Path(small_corpus.root / "docs" / "02_lovelace.txt")
            doc.write_text(
                doc.read_text() + f"\n\nAda Lovelace corresponded with Charles Babbage ({round_})."
            )
            writers = [threading.Thread(target=refresh, args=(s,), daemon=True) for s in ("alpha", "beta")]
            for t in writers:
                t.start()
            for t in writers:
                t.join(180)
    finally:
        stop.set()
        for t in readers:
            t.join(60)
    assert errors == []
    assert len(latencies) >= 40
    assert max(latencies) < 5.0, sorted(latencies)[-5:]


# -- numeric settings are range-checked -------------------------------------------------------------
@pytest.mark.parametrize(
    "override, field",
    [
        ({"llm": {"deadline_s": 0}}, "llm.deadline_s"),
        ({"llm": {"max_retries": -1}}, "llm.max_retries"),
        ({"llm": {"request_timeout_s": -5}}, "llm.request_timeout_s"),
        ({"embedding": {"deadline_s": 0}}, "embedding.deadline_s"),
        ({"embedding": {"batch_size": 0}}, "embedding.batch_size"),
        ({"communities": {"min_size": 1}}, "communities.min_size"),
        ({"communities": {"levels": -1}}, "communities.levels"),
        ({"gates": {"confidence_floor": 1.5}}, "gates.confidence_floor"),
        ({"gates": {"confidence_floor": -0.1}}, "gates.confidence_floor"),
        ({"extraction": {"batch_size": 0}}, "extraction.batch_size"),
        ({"operations": {"lock_wait_s": -1}}, "operations.lock_wait_s"),
        ({"dagster": {"run_start_timeout_s": 0}}, "dagster.run_start_timeout_s"),
    ],
)
def test_numeric_settings_out_of_range_are_refused_naming_the_field(
    tmp_path: Path, override: dict, field: str
) -> None:
    from pgrag_dag.config import load_settings

    path = tmp_path / "pgrag.yaml"
    path.write_text(yaml.safe_dump(override))
    with pytest.raises(ConfigurationError, match=r"invalid settings \(1\): " + re.escape(field) + ": "):
        load_settings(path)


def test_a_configuration_file_that_is_not_yaml_or_an_environment_value_that_is_not_json_is_a_configuration_error(  # noqa: E501
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgrag_dag.config import load_settings

    path = tmp_path / "pgrag.yaml"
    path.write_text("llm: {models: [\n")
    with pytest.raises(ConfigurationError, match="is not valid YAML"):
        load_settings(path)
    path.write_text('"just a string"\n')
    with pytest.raises(ConfigurationError, match="not a mapping of settings"):
        load_settings(path)
    path.write_text("llm: {}\n")
    monkeypatch.setenv("PGRAG_LLM__MODELS", "notjson")
    with pytest.raises(ConfigurationError, match='field "llm"'):
        load_settings(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "realms:\n  r:\n    spaces: [\n",
            r"line 4, column 1: is not valid YAML: while parsing a flow node; expected the node "
            r"content, but found '<stream end>'$",
        ),
        (
            "llm:\n  models: [x]\n\tdeadline_s: 5\n",
            r"line 3, column 1: is not valid YAML: .*found character '\\t'",
        ),
        (
            "a: 1\n---\nb: 2\n",
            r"line 2, column 1: is not valid YAML: expected a single document in the stream",
        ),
        ("# settings\n\n- realms\n- llm\n", r"line 3: is a list, not a mapping of settings"),
        ("pgrag\n", r"line 1: is the single value 'pgrag', not a mapping of settings"),
    ],
    ids=["syntax", "tab", "two-documents", "list", "scalar"],
)
def test_issue13_a_yaml_error_or_a_non_mapping_file_is_one_line_naming_the_file_and_line(
    tmp_path: Path, text: str, message: str
) -> None:
    from pgrag_dag.config import load_settings

    path = tmp_path / "pgrag.yaml"
    path.write_text(text)
    with pytest.raises(ConfigurationError) as err:
        load_settings(path)
    assert "\n" not in str(err.value)
    assert re.search(re.escape(f"configuration file {path} ") + message, str(err.value)), str(err.value)


@pytest.mark.parametrize(
    "dsn",
    [
        "mysql://u:secret@127.0.0.1/x",
        "postgresql://u:secret@[::1",
        "host=127.0.0.1 port=1 user=u password=secret connect_timeout=1",
        "postgresql://u:secret@127.0.0.1:1/x",
    ],
)
def test_connection_errors_never_show_the_password(dsn: str) -> None:
    with pytest.raises(DatabaseError) as err:
        db.connect(dsn, connect_timeout=1)
    assert "secret" not in str(err.value) and "\n" not in str(err.value)
    assert "secret" not in db.scrub(f'missing "=" after "{dsn}"', dsn)


def test_a_released_stage_lock_is_free_at_once_for_the_next_stage(pg_dsn: str, realm: str) -> None:
    """The next stage of one run takes the lock the last one released without a wait: the release is an
    unlock, not a closed session the server notices later (1 run in 12 said it waited for itself)."""
    with db.connect(pg_dsn, autocommit=True) as probe:
        for _ in range(30):
            with locks.stage_lock(pg_dsn, realm, "main", "chunks", wait_s=0):
                pass
            key = locks._key("stage", realm, "main")
            assert probe.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone() == (True,)
            probe.execute("SELECT pg_advisory_unlock(%s)", (key,))
