"""The shipped cassette replayed over the bundled Wikipedia corpus: the demo's graph, offline."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgrag_dag.config import RealmSpec, load_settings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ExtractionError
from pgrag_dag.pipeline import index_documents
from pgrag_dag.store.schema import schema_for
from tests.demo_graph import demo_engine

ROOT = Path(__file__).resolve().parents[2]


def test_replayed_cassette_builds_the_demo_graph_without_a_model_call(pg_dsn: str, realm: str) -> None:
    engine = demo_engine(pg_dsn, realm)
    results = {r.stage: r for r in index_documents(engine, realm, "demo")}
    meta = {stage: r.metadata for stage, r in results.items()}
    passed, quality = results["relations"].checks["graph_quality"]
    assert passed and quality["pronoun_entities"] == quality["fragmented_short_form_vertices"] == 0
    assert quality["duplicate_edge_rows"] == 0 and quality["vocabulary_predicate_share"] > 0.4
    assert engine.usage()["model_calls"] == 0 and engine.usage()["cache_hits"] == 58 * 2 + 30 + 2
    assert meta["chunks"]["chunks"] == 58
    # every gate of Table 2 does work on the recorded responses (the possessive gate is off by default)
    assert meta["gated_triples"]["rejections_per_gate"] == {
        "bare_quantity": 2,
        "confidence_floor": 1,
        "conjunctive_name": 1,
        "orphaned_endpoint": 6,
        "overlong_name": 1,
        "pronominal_name": 2,
        "self_loop": 1,
        "vague_predicate": 2,
    }
    # "Lady King" resolves onto Ada Lovelace, so "Ada Lovelace known_as Lady King" is refused after resolution
    assert meta["relations"]["self_loop_examples"] == [
        "Ada Lovelace = Lady King = Ada Lovelace after resolution"
    ]
    assert meta["gated_triples"]["predicates_snapped"] > 0  # the biography vocabulary snapped predicates
    assert meta["relations"]["relations"] == 603 and meta["relations"]["entities"] == 450
    assert meta["communities"]["communities"] == 30 and meta["community_hierarchy"]["parents"] == 2
    s = sql.Identifier(schema_for(realm))
    with engine.connect() as conn:
        aliases = conn.execute(
            sql.SQL("SELECT aliases FROM {}.entities WHERE name = 'Charles Babbage'").format(s)
        ).fetchone()
        assert aliases is not None and "Babbage" in aliases[0]
        assert conn.execute(
            sql.SQL("SELECT count(*) FROM {}.entities WHERE lower(name) = 'babbage'").format(s)
        ).fetchone() == (0,)
        # Ada Lovelace absorbs her surface forms: one vertex, no fragment named by any of them
        ada = conn.execute(
            sql.SQL("SELECT aliases FROM {}.entities WHERE name = 'Ada Lovelace'").format(s)
        ).fetchone()
        assert ada is not None and {
            "Augusta Ada King, Countess of Lovelace",
            "Augusta Ada Byron",
            "Lady King",
        } <= set(ada[0])
        fragments = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.entities WHERE name = ANY(%s)").format(s), (list(ada[0]),)
        ).fetchone()
        assert fragments == (0,)
        chair = conn.execute(
            sql.SQL(
                """SELECT r.valid_from, r.valid_to FROM {s}.relations r
               JOIN {s}.entities a ON a.id = r.source_id
               JOIN {s}.entities b ON b.id = r.target_id WHERE a.name = 'Charles Babbage'
               AND b.name = 'Lucasian Professor of Mathematics' AND r.valid_to = '1839'"""
            ).format(s=s)
        ).fetchall()
        assert chair == [("1828", "1839")]
        denial = conn.execute(
            sql.SQL(
                """SELECT r.weight FROM {s}.relations r JOIN {s}.entities a ON a.id = r.source_id
               JOIN {s}.entities b ON b.id = r.target_id WHERE a.name = 'Charles Babbage'
               AND r.predicate = 'built'
               AND b.name = 'Analytical Engine' AND r.negated"""
            ).format(s=s)
        ).fetchone()
        assert denial is not None and denial[0] >= 2  # stated in several chunks: corroborated, still a denial
        positive = conn.execute(
            sql.SQL(
                """SELECT count(*) FROM {s}.relations r JOIN {s}.entities a ON a.id = r.source_id
               JOIN {s}.entities b ON b.id = r.target_id WHERE a.name = 'Charles Babbage'
               AND r.predicate = 'built'
               AND b.name = 'Analytical Engine' AND NOT r.negated"""
            ).format(s=s)
        ).fetchone()
        assert positive == (0,)


def test_a_replay_miss_names_the_chunk_and_leaves_the_run_resumable(
    pg_dsn: str, realm: str, tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus" / "wikipedia"
    shutil.copytree(ROOT / "corpus" / "wikipedia", corpus, ignore=shutil.ignore_patterns("responses"))
    shutil.copytree(ROOT / "corpus" / "disney_10k", tmp_path / "corpus" / "disney_10k")
    engine = demo_engine(pg_dsn, realm, tmp_path)
    index_documents(engine, realm, "demo", communities=False)
    # an edited document: its unchanged chunks replay, the changed last chunk misses and is reported
    doc = corpus / "Analytical_Engine.txt"
    doc.write_text(
        doc.read_text(encoding="utf-8") + "\n\nA paragraph the cassette has never seen.\n", encoding="utf-8"
    )
    meta = {r.stage: r.metadata for r in index_documents(engine, realm, "demo", communities=False)}
    assert meta["raw_extractions"]["chunks_extracted"] == 13 and meta["raw_extractions"]["chunks_failed"] == 1
    assert meta["raw_extractions"]["failures"][0].startswith(
        "Analytical_Engine.txt#12: replay miss for extract prompt"
    )
    # a new document that no response was recorded for: every chunk misses, so the run raises
    (corpus / "Zz_New.txt").write_text("Charles Babbage met Mary Somerville in London.\n", encoding="utf-8")
    with pytest.raises(ExtractionError, match=r"Zz_New\.txt#0: replay miss for extract prompt"):
        index_documents(engine, realm, "demo", communities=False)
    with engine.connect() as conn:  # what was extracted before is intact; the failed chunks stay pending
        ok = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.raw_extractions WHERE parse_status = 'ok'").format(
                sql.Identifier(schema_for(realm))
            )
        ).fetchone()
    assert ok is not None and ok[0] == (58 - 1) * 2


def test_the_disney_filings_supersede_by_fiscal_year_and_answer_as_of_a_date(pg_dsn: str, realm: str) -> None:
    from pgrag_dag.query import QueryParam, query_data

    tenk = load_settings(ROOT / "pgrag.yaml").space_spec("tenk", "disney")
    settings = load_settings(
        ROOT / "pgrag.yaml", database_url=pg_dsn, realms={realm: RealmSpec(spaces={"disney": tenk})}
    )
    engine = Engine.from_settings(settings)
    engine.import_cassettes()
    meta = {r.stage: r.metadata for r in index_documents(engine, realm, "disney")}
    assert engine.usage()["model_calls"] == 0
    # FY2017's decreases are superseded by FY2018's increases on the same pairs (group increased/decreased);
    # one CFO at a time (cfo_of is single-valued in the finance preset): each later filing's CFO supersedes
    by_reason = meta["relations"]["supersessions_by_reason"]
    assert by_reason["group"] == 4 and by_reason["single_valued"] >= 2
    assert (
        "Walt Disney Company decreased Revenues  ⟶ superseded by ⟶  Walt Disney Company increased Revenues"
        in meta["relations"]["supersession_examples"]
    )

    def cfos(as_of: str, include_superseded: bool = False) -> set[str]:
        res = query_data(
            "Who was the chief financial officer of The Walt Disney Company?",
            QueryParam(space="disney", as_of=as_of, include_superseded=include_superseded),
            dsn=engine.dsn,
            realm=realm,
            embedder=engine.embedder(),
        )
        return {r["subject"] for r in res.relations if r["predicate"] == "cfo_of"}

    # the current CFO is the last filing's; earlier ones are superseded, and the history answers when asked
    # for (§5.4: superseded relations are excluded by default, and as_of filters by the validity they state)
    assert cfos("2016") == {"Christine M. McCarthy"}
    assert cfos("2012") == set()
    assert cfos("2012", include_superseded=True) == {"James A. Rasulo"}
    assert cfos("2005", include_superseded=True) == {"Thomas O. Staggs"}


def test_issue14_the_last_filing_indexed_later_is_believed_after_the_instant_before_it(
    pg_dsn: str, realm: str
) -> None:
    """What the demo does for tenk.disney: index the filings without FY2018 (no communities), then all of
    them. The second run extracts only FY2018's chunks and ends with the one-run graph; as believed just
    before FY2018 was added (the belief_log instant), FY2017's revenue decrease is current and no FY2018
    passage is read; now it is superseded by the increase."""
    from pgrag_dag.ingest.sources import without_last_file
    from pgrag_dag.query import QueryParam, query_data
    from pgrag_dag.store.documents import document_indexed
    from pgrag_dag.store.history import before_added

    base = load_settings(ROOT / "pgrag.yaml", database_url=pg_dsn)
    first, withheld = without_last_file(base, base.space_spec("tenk", "disney"))
    assert withheld == "FY2018.txt"

    def engine_for(spec: object) -> Engine:
        return Engine.from_settings(
            base.model_copy(update={"realms": {realm: RealmSpec(spaces={"disney": spec})}})
        )

    with psycopg.connect(pg_dsn) as conn:  # a realm never indexed has neither documents nor history
        assert not document_indexed(conn, "never_indexed", "disney", withheld)
        assert before_added(conn, "never_indexed", "disney", withheld) is None
    early = engine_for(first)
    early.import_cassettes()
    meta1 = {r.stage: r.metadata for r in index_documents(early, realm, "disney", communities=False)}
    assert meta1["chunks"]["documents"] == 6
    assert meta1["relations"]["supersessions_by_reason"] == {"group": 3, "single_valued": 2}  # CFOs, issue 27
    with early.connect() as conn:
        assert not document_indexed(conn, realm, "disney", withheld)
        assert before_added(conn, realm, "disney", withheld) is None
    engine = engine_for(base.space_spec("tenk", "disney"))
    meta = {r.stage: r.metadata for r in index_documents(engine, realm, "disney")}
    assert (
        engine.usage()["model_calls"] == 0 and engine.usage()["cache_hits"] == 2 * 2 + 3 + 1
    )  # FY2018's 2 chunks, reports
    assert meta["chunks"]["documents_added"] == 1 and meta["chunks"]["documents_unchanged"] == 6
    assert meta["raw_extractions"]["chunks_extracted"] == 2
    assert (meta["relations"]["relations"], meta["relations"]["entities"]) == (
        34,
        21,
    )  # as indexed in one run
    assert meta["relations"]["supersessions_by_reason"]["group"] == 4
    # this run's supersessions by reason add up to its count, unlike its decisions (re-decided pairs too)
    assert meta["relations"]["newly_superseded"] == 4
    assert meta["relations"]["newly_superseded_by_reason"] == {"group": 4}
    with engine.connect() as conn:
        assert document_indexed(conn, realm, "disney", withheld)
        instant = before_added(conn, realm, "disney", withheld)
        added = conn.execute(
            sql.SQL("SELECT at FROM {}.belief_log WHERE kind = 'document' AND doc_key = %s").format(
                sql.Identifier(schema_for(realm))
            ),
            (withheld,),
        ).fetchall()
    assert instant is not None and [(instant + timedelta(microseconds=1),)] == added

    def revenues(**kw: object) -> tuple[dict[str, tuple[bool, str | None]], set[str]]:
        res = query_data(
            "How did The Walt Disney Company's revenues change in its most recent fiscal year?",
            QueryParam(space="disney", include_superseded=True, **kw),  # type: ignore[arg-type]
            dsn=engine.dsn,
            realm=realm,
            embedder=engine.embedder(),
        )
        names = {r["id"]: r["predicate"] for r in res.relations}
        return (
            {
                r["predicate"]: (
                    bool(r["superseded"]),
                    names.get(r["superseded_by"]) if r["superseded"] else None,
                )
                for r in res.relations
                if r["subject"] == "Walt Disney Company" and r["object"] == "Revenues"
            },
            {c["doc_key"] for c in res.chunks},
        )

    then, docs_then = revenues(as_believed_at=instant)
    now, docs_now = revenues()
    assert then == {
        "decreased": (False, None),
        "increased": (True, "decreased"),
    }  # FY2016's increase superseded by FY2017
    assert withheld not in docs_then and len(docs_then) == 6
    assert now == {"decreased": (True, "increased"), "increased": (False, None)} and withheld in docs_now


# The entities a reader of the Wikipedia articles would call relevant to "Who translated Menabrea's paper?"
# (the paper, its author, the journal it appeared in, who commissioned and made the translation, what it
# became).
MENABREA_RELEVANT = {
    "Menabrea's article on the Analytical Engine",
    "Luigi Menabrea",
    "Luigi Federico Menabrea",
    "Charles Wheatstone",
    "Bibliothèque universelle de Genève",
    "Sketch of the Analytical Engine",
    "Ada Lovelace",
    "Turin talks",
    "Notes",
    "Analytical Engine",
    "Taylor's Scientific Memoirs",
}
DISNEY_CFOS = {"Thomas O. Staggs", "James A. Rasulo", "Christine M. McCarthy"}


def _relevant_entities_first(engine: Engine) -> tuple[bool, list[str], list[str]]:
    """Whether the demo's Menabrea and CFO questions seed on relevant entities in realms wiki and tenk
    by entity search (the mentions path, whose seeds are the question's nearest entity vectors, so the
    embedder decides them): the top 4 entities for Menabrea all in :data:`MENABREA_RELEVANT`, the three
    CFOs among the top 5."""
    from pgrag_dag.assets.demo import CFO_QUESTION
    from pgrag_dag.query import QueryParam, query_data

    def top(realm: str, space: str, question: str, n: int) -> list[str]:
        param = QueryParam(space=space, graph_ranking="mentions", collapse_duplicates=False)
        res = query_data(question, param, dsn=engine.dsn, realm=realm, embedder=engine.embedder())
        return [e["name"] for e in res.entities[:n]]

    menabrea = top("wiki", "demo", "Who translated Menabrea's paper?", 4)
    cfo = top("tenk", "disney", CFO_QUESTION, 5)  # the demo's own question
    return set(menabrea) <= MENABREA_RELEVANT and DISNEY_CFOS <= set(cfo), menabrea, cfo


@pytest.mark.slow
@pytest.mark.dagster
def test_make_demo_runs_offline_with_the_local_model_and_replays_every_answer(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `make demo` does on a fresh clone (issue 12 "done when"): both partitions through Dagster with the
    local embedder, every check green, the Menabrea and CFO questions seeded on relevant entities, and each
    demo question answered from the cassette (its synthesis prompts were recorded with the local model's
    retrieval). Re-embedded with the hashing embedder (the old default), unrelated entities come first
    (Augusta Leigh, the Uniform Penny Post; segment names for the CFO), the context differs, and the demo
    says the recorded answer does not apply instead of failing."""
    import pgrag_dag.assets.demo as demo

    monkeypatch.delenv("PGRAG_EMBEDDING__MODEL")
    monkeypatch.setenv("PGRAG_CONFIG", str(ROOT / "pgrag.yaml"))
    monkeypatch.setenv("PGRAG_DATA_DIR", str(tmp_path / "data"))  # the Dagster instance
    monkeypatch.setenv("PGRAG_DATABASE_URL", pg_dsn)  # realms wiki and tenk, which no other test uses
    try:
        demo.run_demo()
        out = capsys.readouterr().out
        # 8 contracts, graph_quality, 4 pending_work, 2 yield, skipped_documents, communities_current
        assert out.count("checks           17/17 passed (all green)") == 2
        assert out.count("answer (synthesised, replayed): ") == 6 and "answer: not shown" not in out
        assert "As of 2012, the chief financial officer was James A. Rasulo" in out
        # issue 14: tenk.disney first without FY2018 (no communities), then FY2018 alone is extracted ...
        first, disney = out.split("partition tenk.disney without its last document, FY2018.txt")[1].split(
            "\npartition tenk.disney  (Dagster run"
        )
        assert (
            "documents        6, 9 chunks; 17 entities, 29 relations, 5 superseded; communities not built yet"
            in first
        )
        assert (
            "model            0 calls, 18 cache hits" in first
            and "checks           12/12 passed (all green)" in first
        )
        disney = disney.split("\npartition wiki.demo")[0]
        for line in (
            "documents        7  (1 added, 0 replaced, 0 removed, 6 unchanged)",
            "chunks           11  (2 inserted this run)",
            "entities         21 live, 0 dormant",
            "relations        34  (0 negated, 30 with a validity period)",
            # this run's 4 by reason (a trial read its decisions, "group 4, single_valued 2", as of them)
            "supersession     6 superseded (4 this run: group 4)",
            "communities      3 (level 0), 1 parent topic",
            "model            0 calls, 8 cache hits",
        ):  # ... and the graph is the one-run graph
            assert f"\n  {line}" in disney, line
        assert "\n    documents added: 1  (FY2018.txt)" in disney  # the change feed of that run
        # ... and the revenue question as believed just before FY2018 was added, then now
        then, now = disney.split("\nbelief time: FY2018.txt was added at ")[1].split(
            "\nquery_data(\"How did The Walt Disney Company's revenues change "
            'in its most recent fiscal year?", '
            "mode=mix, include_superseded=True"
        )[1:]
        decrease = "hop 1: (Walt Disney Company) --[decreased]--> (Revenues) [valid 2017 to 2017]"
        instant = then.split("'", 2)[1]
        assert (
            then.startswith(", as_believed_at='") and "passages from 5 documents, the last FY2017.txt" in then
        )
        assert (
            f"{decrease}: Revenues for fiscal 2017 decreased 1%" in then
        )  # current then; the increase superseded by it
        assert (
            "hop 1: (Walt Disney Company) --[increased]--> (Revenues) [valid 2012 to 2018] [superseded]: "
            in then
        )
        assert "superseded by: (Walt Disney Company) --[decreased]--> (Revenues) [valid 2017 to 2017]" in then
        assert (
            "answer (synthesised, replayed): In the most recent fiscal year the context covers, fiscal 2017, "
            "The Walt Disney Company's revenues decreased 1%, or $0.5 billion, to $55.1 billion [1]." in then
        )
        assert now.startswith("):") and "passages from 6 documents, the last FY2018.txt" in now
        assert (
            f"{decrease} [superseded]: Revenues for fiscal 2017" in now
        )  # superseded now, by FY2018's increase
        assert "superseded by: (Walt Disney Company) --[increased]--> (Revenues) [valid 2012 to 2018]" in now
        assert (
            "answer (synthesised, replayed): In fiscal 2018, the most recent fiscal year in the context, "
            "The Walt Disney Company's revenues increased 8%, or $4.3 billion, to $59.4 billion [3]." in now
        )
        settings = load_settings(ROOT / "pgrag.yaml")
        assert settings.embedding.model == "local/all-MiniLM-L6-v2"  # what the demo's configuration says
        relevant, menabrea, cfo = _relevant_entities_first(Engine.from_settings(settings))
        assert relevant, (menabrea, cfo)
        monkeypatch.setenv("PGRAG_EMBEDDING__MODEL", "hashing-sha256")
        demo.run_demo()  # re-embeds both realms with the hashing embedder, then answers what it can
        out = capsys.readouterr().out
        assert (
            "realm wiki is embedded with local/all-MiniLM-L6-v2 (384) "
            "but the configuration says hashing-sha256" in out
        )
        # FY2018 is indexed already: no run without it, nothing extracted, the same belief instant
        assert "partition tenk.disney: its last document, FY2018.txt, was indexed by an earlier run" in out
        assert "without its last document" not in out and "  model            0 calls, 0 cache hits" in out
        assert f"include_superseded=True, as_believed_at='{instant}'):" in out
        assert (
            out.count("answer: not shown — the cassette has no recorded answer for this exact context") >= 1
        )
        relevant, menabrea, cfo = _relevant_entities_first(
            Engine.from_settings(load_settings(ROOT / "pgrag.yaml"))
        )
        assert not relevant and "Augusta Leigh" in menabrea, (menabrea, cfo)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for name in ("wiki", "tenk"):
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema_for(name)))
                )
                conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (name,))
