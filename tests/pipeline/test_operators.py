"""The operator framework: registry, composition at load time, user operators by import path and entry
point, extra gates and enrichers in the pipeline (real PostgreSQL, real litellm against the stub)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml
from psycopg import sql

from pgrag_dag.errors import ConfigurationError, ContractError
from pgrag_dag.pipeline import index_documents, stage_chunks, stage_gated_triples, stage_resolved_entities
from pgrag_dag.pipeline.composition import builtins, compose, resolve_operator
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus


def compose_space(corpus: SmallCorpus, realm: str, **space: object) -> None:
    """Rewrite the fixture's configuration with ``space`` merged into space ``main``."""
    cfg = yaml.safe_load(corpus.config.read_text())
    cfg["realms"][realm]["spaces"]["main"].update(space)
    corpus.config.write_text(yaml.safe_dump(cfg))


def operator_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: str) -> None:
    """Write module ``name`` (``json``, ``polars as pl`` and ``operator`` imported, then ``body``) and
    put it on ``sys.path`` for this test."""
    (tmp_path / f"{name}.py").write_text(
        "import json\nimport polars as pl\nfrom pgrag_dag.operators import operator\n" + body
    )
    monkeypatch.syspath_prepend(str(tmp_path))


def _rows(dsn: str, realm: str, query: str) -> list[tuple]:
    with db.connect(dsn) as conn:
        return conn.execute(sql.SQL(query).format(s=sql.Identifier(schema_for(realm)))).fetchall()


def test_the_registry_holds_the_built_ins_under_stable_names() -> None:
    ops = builtins()
    assert {n: o.slot for n, o in ops.items()} == {
        "paragraph_pack": "chunker",
        "token_window": "chunker",
        "markdown_heading": "chunker",
        "paragraph": "chunker",
        "llm": "extractor",
        "cooccurrence": "extractor",
        "nlp": "extractor",
        "name_stoplist": "gate",
        "type_map": "enricher",
    }
    assert [n for n, o in ops.items() if o.calls_model] == ["llm"]
    assert all(o.description for o in ops.values())


def test_defaults_compose_todays_pipeline(small_corpus: SmallCorpus, realm: str) -> None:
    comp = compose(small_corpus.settings(), realm, "main")
    assert comp.chunker.op.name == "paragraph_pack" and comp.extractor.op.name == "llm"
    # the global chunking and extraction sections are the built-ins' options
    assert (comp.chunker.options.chunk_chars, comp.chunker.options.overlap_chars) == (200, 60)
    assert comp.extractor.options.concurrency == 2 and comp.extractor.identity == "extract-v2"
    assert comp.gates == () and comp.enrichers == ()


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (
            {"chunker": "sentences_please"},
            "space {realm}.main, stage chunker: unknown operator 'sentences_please'",
        ),
        (
            {"chunker": "name_stoplist"},
            "space {realm}.main, stage chunker: operator 'name_stoplist' is a gate",
        ),
        (
            {"chunker": {"name": "token_window", "options": {"tokens": 0}}},
            "space {realm}.main, stage chunker, operator 'token_window': option tokens:",
        ),
        (
            {"chunker": {"name": "token_window", "options": {"token": 10}}},
            "space {realm}.main, stage chunker, operator 'token_window': options: unknown key 'token' "
            "(did you mean 'tokens'?)",
        ),
        (
            {"gates": [{"name": "name_stoplist", "options": {}}]},
            "stage gate, operator 'name_stoplist': option names: Field required",
        ),
        ({"extractor": "tests.user_operators:not_an_operator"}, "is a str, not a pgrag_dag Operator"),
        (
            {"extractor": "tests.no_such_module:thing"},
            "stage extractor: cannot import operator 'tests.no_such_module:thing'",
        ),
        (
            {"enrichers": ["tests.user_operators:sentence_chunker"]},
            "stage enricher: operator 'tests.user_operators:sentence_chunker' is a chunker",
        ),
        (
            {"gate": ["name_stoplist"]},
            "spaces.main: unknown key 'gate' (did you mean 'gates'?)",
        ),  # a misspelt slot is never ignored
    ],
)
def test_a_bad_composition_fails_at_load_naming_space_stage_and_option(
    small_corpus: SmallCorpus, realm: str, space: dict, message: str
) -> None:
    compose_space(small_corpus, realm, **space)
    with pytest.raises(ConfigurationError) as err:
        small_corpus.settings()
    assert message.format(realm=realm) in str(err.value)


def test_an_extra_gate_may_not_take_a_built_in_gate_s_name(
    small_corpus: SmallCorpus, realm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator_module(
        tmp_path,
        monkeypatch,
        "impostor",
        "@operator('vague_predicate', 'gate')\n"
        "def gate(frame, options, ctx):\n    'Pretends to be a built-in gate.'\n    return frame\n",
    )
    compose_space(small_corpus, realm, gates=["impostor:gate"])
    with pytest.raises(ConfigurationError, match="the reason of a built-in gate"):
        small_corpus.settings()


def test_a_user_gate_by_import_path_adds_refusals_with_its_own_reason_and_no_model_call(
    small_corpus: SmallCorpus, realm: str
) -> None:
    index_documents(small_corpus.engine(), realm, "main", communities=False)
    calls = len(small_corpus.chat_requests())
    before = dict(
        _rows(
            small_corpus.engine().dsn,
            realm,
            "SELECT gate, count(*) FROM {s}.gate_decisions WHERE gate IS NOT NULL GROUP BY 1",
        )
    )
    compose_space(small_corpus, realm, gates=["tests.user_operators:full_names"])
    results = {r.stage: r for r in index_documents(small_corpus.engine(), realm, "main", communities=False)}
    assert len(small_corpus.chat_requests()) == calls  # a gate change re-gates the stored extractions
    gated = results["gated_triples"].metadata
    # "Babbage" (a one-word name, here the stub endpoint of a triple) is refused by the house gate,
    # London (a Place) is kept; the built-in refusals stay
    assert gated["rejections_per_gate"]["full_names"] >= 1
    assert {k: v for k, v in gated["rejections_per_gate"].items() if k in before} == before
    refused = _rows(
        small_corpus.engine().dsn,
        realm,
        "SELECT DISTINCT kind, offending_value FROM {s}.gate_decisions WHERE gate = 'full_names'",
    )
    assert refused == [("entity", "Babbage")]
    # the triple naming Babbage lost its endpoint: refused as orphaned, never accepted
    orphans = _rows(
        small_corpus.engine().dsn,
        realm,
        "SELECT subject, predicate, object FROM {s}.gate_decisions "
        "WHERE gate = 'orphaned_endpoint' AND offending_value = 'Babbage'",
    )
    assert ("Babbage", "designed", "Analytical Engine") in orphans
    assert results["gated_triples"].checks["operator_full_names"][0] is True
    assert gated["operators"]["gates"][0]["operator"] == "tests.user_operators:full_names"
    names = {
        n
        for (n,) in _rows(
            small_corpus.engine().dsn, realm, "SELECT name FROM {s}.entities WHERE dormant_since IS NULL"
        )
    }
    assert "Charles Babbage" in names


def test_extra_gates_never_accept_what_a_built_in_gate_refused(
    small_corpus: SmallCorpus, realm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator_module(
        tmp_path,
        monkeypatch,
        "lenient",
        "@operator('lenient', 'gate')\n"
        "def gate(frame, options, ctx):\n    'Refuses nothing.'\n"
        "    return pl.DataFrame({'refused': [False] * frame.height})\n",
    )
    index_documents(small_corpus.engine(), realm, "main", communities=False)
    stored = _rows(
        small_corpus.engine().dsn,
        realm,
        "SELECT accepted, gate, count(*) FROM {s}.gate_decisions GROUP BY 1, 2 ORDER BY 1, 2",
    )
    compose_space(small_corpus, realm, gates=["lenient:gate"])
    result = stage_gated_triples(small_corpus.engine(), realm, "main")
    assert (
        result.metadata["rewritten"] is False
    )  # the same decisions: a gate that refuses nothing changes nothing
    assert (
        _rows(
            small_corpus.engine().dsn,
            realm,
            "SELECT accepted, gate, count(*) FROM {s}.gate_decisions GROUP BY 1, 2 ORDER BY 1, 2",
        )
        == stored
    )


def test_a_gate_returning_the_wrong_number_of_verdicts_breaks_its_contract(
    small_corpus: SmallCorpus, realm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator_module(
        tmp_path,
        monkeypatch,
        "short",
        "@operator('short_gate', 'gate')\n"
        "def gate(frame, options, ctx):\n    'Forgets the last row.'\n"
        "    return pl.DataFrame({'refused': [False] * (frame.height - 1)})\n",
    )
    index_documents(small_corpus.engine(), realm, "main", communities=False)
    compose_space(small_corpus, realm, gates=["short:gate"])
    with pytest.raises(ContractError, match=r"GateVerdictContract \(operator short_gate\).*verdicts for"):
        stage_gated_triples(small_corpus.engine(), realm, "main")


def test_a_user_operator_loads_by_entry_point(
    small_corpus: SmallCorpus, realm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real installed distribution's entry point (a dist-info directory on sys.path)."""
    site = tmp_path / "site"
    dist = site / "house_rules-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: house-rules\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pgrag_dag.operators]\nhouse_gate = house_rules:gate\n")
    (site / "house_rules.py").write_text("from tests.user_operators import full_names as gate\n")
    monkeypatch.syspath_prepend(str(site))
    import importlib

    importlib.invalidate_caches()
    assert resolve_operator("house_gate").name == "full_names"
    compose_space(small_corpus, realm, gates=["house_gate"])
    comp = compose(small_corpus.settings(), realm, "main")
    assert comp.gates[0].configured_as == "house_gate" and comp.gates[0].op.slot == "gate"
    sys.modules.pop("house_rules", None)


def test_a_user_chunker_by_import_path_replaces_only_changed_chunks(
    small_corpus: SmallCorpus, realm: str
) -> None:
    index_documents(small_corpus.engine(), realm, "main", communities=False)
    compose_space(
        small_corpus,
        realm,
        chunker={"name": "tests.user_operators:sentence_chunker", "options": {"per_chunk": 1}},
    )
    meta = stage_chunks(small_corpus.engine(), realm, "main").metadata
    texts = [
        t
        for (t,) in _rows(
            small_corpus.engine().dsn, realm, "SELECT text FROM {s}.documents ORDER BY doc_key, chunk_index"
        )
    ]
    assert texts[:2] == [
        "Charles Babbage designed the Difference Engine in London.",
        "The British government funded the Difference Engine for a decade.",
    ]
    assert meta["documents_replaced"] == 2 and meta["operators"]["chunker"]["options"] == {"per_chunk": 1}


def test_an_enricher_normalises_types_may_not_rename_and_its_removal_reverts(
    small_corpus: SmallCorpus, realm: str
) -> None:
    index_documents(small_corpus.engine(), realm, "main", communities=False)
    resolved = dict(_rows(small_corpus.engine().dsn, realm, "SELECT name, entity_type FROM {s}.entities"))
    compose_space(
        small_corpus, realm, enrichers=[{"name": "type_map", "options": {"mapping": {"person": "Human"}}}]
    )
    result = stage_resolved_entities(small_corpus.engine(), realm, "main")
    types = dict(_rows(small_corpus.engine().dsn, realm, "SELECT name, entity_type FROM {s}.entities"))
    assert (
        types["Ada Lovelace"] == "Human"
        and types["Charles Babbage"] == "Human"
        and types["London"] == "Place"
    )
    assert result.metadata["entities_enriched"] == 2 and result.metadata["entities_updated"] == 2
    again = stage_resolved_entities(small_corpus.engine(), realm, "main")  # steady: nothing rewritten
    assert again.metadata["entities_updated"] == 0 and again.data_version == result.data_version
    # a changed mapping applies to what resolution decided, not to the earlier enricher's output
    compose_space(
        small_corpus,
        realm,
        enrichers=[{"name": "type_map", "options": {"mapping": {"person": "Individual"}}}],
    )
    stage_resolved_entities(small_corpus.engine(), realm, "main")
    assert (
        dict(_rows(small_corpus.engine().dsn, realm, "SELECT name, entity_type FROM {s}.entities"))[
            "Ada Lovelace"
        ]
        == "Individual"
    )
    compose_space(small_corpus, realm, enrichers=["tests.user_operators:renaming_enricher"])
    with pytest.raises(ContractError, match=r"operator renaming_enricher.*may not change a canonical name"):
        stage_resolved_entities(small_corpus.engine(), realm, "main")
    # removing the enricher restores resolution's types
    compose_space(small_corpus, realm, enrichers=[])
    reverted = stage_resolved_entities(small_corpus.engine(), realm, "main")
    assert (
        dict(_rows(small_corpus.engine().dsn, realm, "SELECT name, entity_type FROM {s}.entities"))
        == resolved
    )
    assert reverted.metadata["entities_updated"] == 2
    assert _rows(
        small_corpus.engine().dsn, realm, "SELECT count(*) FROM {s}.entities WHERE resolved_type IS NOT NULL"
    ) == [(0,)]


def test_a_user_extractor_needs_only_its_contract_s_columns_and_its_bugs_are_named(
    small_corpus: SmallCorpus, realm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator_module(
        tmp_path,
        monkeypatch,
        "mini",
        "@operator('titles', 'extractor')\n"
        "def titles(chunks, options, ctx):\n    'One entity per chunk: its document title.'\n"
        "    body = [json.dumps({'entities': [{'name': t, 'type': 'Work'}], 'triples': []}) "
        "for t in chunks['title']]\n"
        "    return pl.DataFrame({'chunk_id': chunks['chunk_id'], 'pass': [0] * chunks.height,\n"
        "                         'parse_status': ['ok'] * chunks.height, 'parsed': body})\n"
        "@operator('broken', 'extractor')\n"
        "def broken(chunks, options, ctx):\n    'Divides by zero.'\n    return 1 / 0\n",
    )
    compose_space(small_corpus, realm, extractor="mini:broken")
    stage_chunks(small_corpus.engine(), realm, "main")
    from pgrag_dag.errors import OperatorError
    from pgrag_dag.pipeline import stage_raw_extractions

    with pytest.raises(
        OperatorError,
        match=rf"operator 'broken' \(extractor of space {realm}.main\) raised ZeroDivisionError",
    ):
        stage_raw_extractions(small_corpus.engine(), realm, "main")
    assert _rows(small_corpus.engine().dsn, realm, "SELECT count(*) FROM {s}.raw_extractions") == [(0,)]
    compose_space(small_corpus, realm, extractor="mini:titles")
    meta = stage_raw_extractions(small_corpus.engine(), realm, "main").metadata
    assert meta["chunks_extracted"] == meta["passes_written"] > 0 and small_corpus.chat_requests() == []
    stored = _rows(
        small_corpus.engine().dsn,
        realm,
        "SELECT DISTINCT model, prompt_version, prompt_tokens FROM {s}.raw_extractions",
    )
    assert (
        len(stored) == 1
        and stored[0][0] == "titles"
        and stored[0][1].startswith("titles@1:")
        and stored[0][2] == 0
    )


def test_an_operator_module_beside_the_configuration_needs_no_install(
    small_corpus: SmallCorpus, realm: str
) -> None:
    (small_corpus.root / "house_chunkers.py").write_text(
        "from tests.user_operators import sentence_chunker as one_per_sentence\n"
    )
    compose_space(
        small_corpus, realm, chunker={"name": "house_chunkers:one_per_sentence", "options": {"per_chunk": 1}}
    )
    try:
        assert compose(small_corpus.settings(), realm, "main").chunker.op.name == "sentence_chunker"
    finally:
        sys.modules.pop("house_chunkers", None)
        if str(small_corpus.root) in sys.path:
            sys.path.remove(str(small_corpus.root))


def test_malformed_extractions_and_lost_documents_break_the_contract_and_write_nothing(
    small_corpus: SmallCorpus, realm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator_module(
        tmp_path,
        monkeypatch,
        "bad_ops",
        "@operator('listy', 'extractor')\n"
        "def listy(chunks, options, ctx):\n    'Returns a JSON list, not an extraction.'\n"
        "    return pl.DataFrame({'chunk_id': chunks['chunk_id'], 'pass': [0] * chunks.height,\n"
        "                         'parse_status': ['ok'] * chunks.height, "
        "'parsed': ['[]'] * chunks.height})\n"
        "@operator('first_only', 'chunker')\n"
        "def first_only(docs, options, ctx):\n    'Chunks only the first document.'\n"
        "    return pl.DataFrame({'doc_key': docs['doc_key'][:1], 'chunk_index': [0], "
        "'text': docs['text'][:1],\n"
        "                         'metadata': pl.Series([None], dtype=pl.String)})\n",
    )
    from pgrag_dag.pipeline import stage_raw_extractions

    stage_chunks(small_corpus.engine(), realm, "main")
    compose_space(small_corpus, realm, extractor="bad_ops:listy")
    with pytest.raises(ContractError, match=r"operator listy.*parsed_is_an_extraction"):
        stage_raw_extractions(small_corpus.engine(), realm, "main")
    assert _rows(small_corpus.engine().dsn, realm, "SELECT count(*) FROM {s}.raw_extractions") == [(0,)]
    compose_space(small_corpus, realm, extractor="llm", chunker="bad_ops:first_only")
    with pytest.raises(ContractError, match=r"operator first_only.*no chunk for 1 document"):
        stage_chunks(small_corpus.engine(), realm, "main")
    assert _rows(small_corpus.engine().dsn, realm, "SELECT count(DISTINCT doc_key) FROM {s}.documents") == [
        (2,)
    ]


DECISIONS = (
    "SELECT chunk_id, pass, kind, name, subject, predicate, object, accepted, gate FROM {s}.gate_decisions "
    "ORDER BY chunk_id, pass, kind, name, subject, predicate, object"
)


def test_switching_extractors_back_and_forth_replays_the_first_extraction(
    small_corpus: SmallCorpus, realm: str
) -> None:
    """Another extractor's names never seed the model's document context, so the prompts of the first
    llm run come back exactly and are answered from the response cache (batch size 1: each chunk's
    prompt carries the names its document's earlier chunks produced)."""
    compose_space(small_corpus, realm, extractor={"name": "llm", "options": {"batch_size": 1}})
    first = {r.stage: r for r in index_documents(small_corpus.engine(), realm, "main", communities=False)}
    first_decisions = _rows(small_corpus.engine().dsn, realm, DECISIONS)
    calls = len(small_corpus.chat_requests())
    compose_space(small_corpus, realm, extractor="cooccurrence")
    off = {r.stage: r for r in index_documents(small_corpus.engine(), realm, "main", communities=False)}
    assert off["raw_extractions"].metadata["chunks_extracted"] == first["chunks"].metadata["chunks"]
    assert len(small_corpus.chat_requests()) == calls
    compose_space(small_corpus, realm, extractor={"name": "llm", "options": {"batch_size": 1}})
    back = {r.stage: r for r in index_documents(small_corpus.engine(), realm, "main", communities=False)}
    meta = back["raw_extractions"].metadata
    assert meta["chunks_extracted"] == first["chunks"].metadata["chunks"] and meta["model_calls"] == 0
    assert meta["cache_hits"] == first["raw_extractions"].metadata["model_calls"]
    assert len(small_corpus.chat_requests()) == calls
    # the same gate decisions as the first run (the data version is a change counter: it moved twice since)
    assert _rows(small_corpus.engine().dsn, realm, DECISIONS) == first_decisions
    assert back["gated_triples"].data_version not in (
        first["gated_triples"].data_version,
        off["gated_triples"].data_version,
    )
    # while the cooccurrence rows were stored, the document context read only the llm extractor's
    from pgrag_dag.store import staging

    compose_space(small_corpus, realm, extractor="cooccurrence")
    index_documents(small_corpus.engine(), realm, "main", communities=False)
    with db.connect(small_corpus.engine().dsn) as conn:
        keys = [
            k
            for (k,) in conn.execute(
                sql.SQL("SELECT DISTINCT doc_key FROM {}.documents").format(sql.Identifier(schema_for(realm)))
            )
        ]
        assert staging.document_names(conn, realm, "main", keys, extractor="extract-v2") == {}
        seeded = staging.document_names(
            conn,
            realm,
            "main",
            keys,
            extractor=compose(small_corpus.settings(), realm, "main").extractor.identity,
        )
        assert sorted(seeded) == sorted(keys)


def test_check_names_never_collide_and_one_name_denotes_one_operator(
    small_corpus: SmallCorpus, realm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgrag_dag.operators import operator_check_name

    names = ["house-rules", "house_rules", "名前", "氏名"]
    assert (
        len({operator_check_name(n) for n in names}) == 4
        and operator_check_name("house_rules") == "operator_house_rules"
    )
    assert all(re.fullmatch(r"[A-Za-z0-9_]+", operator_check_name(n)) for n in names)
    operator_module(
        tmp_path,
        monkeypatch,
        "twins",
        "@operator('house', 'gate')\ndef a(frame, options, ctx):\n    'A.'\n"
        "    return pl.DataFrame({'refused': [False] * frame.height})\n"
        "@operator('house', 'gate')\ndef b(frame, options, ctx):\n    'B.'\n"
        "    return pl.DataFrame({'refused': [True] * frame.height})\n",
    )
    cfg = yaml.safe_load(small_corpus.config.read_text())
    main = cfg["realms"][realm]["spaces"]["main"]
    cfg["realms"][realm]["spaces"]["other"] = {**main, "gates": ["twins:b"]}
    main["gates"] = ["twins:a"]
    small_corpus.config.write_text(yaml.safe_dump(cfg))
    with pytest.raises(
        ConfigurationError, match=r"operator 'twins:b' is named 'house', like another operator in"
    ):
        small_corpus.settings()


def test_an_operator_cannot_change_its_input_or_the_engine_s_gate_settings(
    small_corpus: SmallCorpus, realm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator_module(
        tmp_path,
        monkeypatch,
        "meddling",
        "@operator('meddler', 'gate')\n"
        "def meddler(frame, options, ctx):\n    'Raises the floor and eats a column.'\n"
        "    ctx.gates.confidence_floor = 5.0\n    frame.drop_in_place('name')\n"
        "    return pl.DataFrame({'refused': [False] * frame.height})\n",
    )
    index_documents(small_corpus.engine(), realm, "main", communities=False)
    compose_space(small_corpus, realm, gates=["meddling:meddler"])
    engine = small_corpus.engine()
    result = stage_gated_triples(engine, realm, "main")
    assert result.metadata["rewritten"] is False and engine.settings.gates.confidence_floor == 0.5
