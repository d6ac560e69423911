"""Benchmark loaders and harness guards (evaluation/benchmarks.py; paper §8.1, §8.2, §8.11, §9; issue 17 item
5), on the tiny fixtures in the published formats under evaluation/fixtures/. The documents a loader makes are
read back through the product's own source reader (pgrag_dag.ingest.sources.read_sources), as a space would
read them."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from evaluation.benchmarks import (
    BenchmarkFormatError,
    Document,
    RunGuard,
    check_company_counts,
    company_counts,
    ectqa_spaces,
    load_ectqa_corpus,
    load_ectqa_questions,
    load_longmemeval,
    space_spec,
    write_space_jsonl,
)
from evaluation.scoring import score_strict
from pgrag_dag.config import load_settings
from pgrag_dag.ingest.sources import read_sources

FIXTURES = Path(__file__).resolve().parents[2] / "evaluation" / "fixtures"
LME = FIXTURES / "longmemeval" / "longmemeval_tiny.json"
CORPUS = FIXTURES / "ectqa" / "corpus" / "base.jsonl"
QUESTIONS = FIXTURES / "ectqa" / "questions" / "local_base.jsonl"


def _read_as_spaces(tmp_path: Path, spaces: dict[str, list[Document]]) -> dict[str, list[dict[str, Any]]]:
    """Write each space's documents as JSONL, declare the spaces in a pgrag.yaml, and read them back with
    the product's source reader: space → rows of its documents frame, in doc_order."""
    decl = {
        name: space_spec(write_space_jsonl(docs, tmp_path / "spaces" / f"{name}.jsonl"))
        for name, docs in spaces.items()
    }
    cfg = tmp_path / "pgrag.yaml"
    cfg.write_text(
        yaml.safe_dump({"data_dir": str(tmp_path / "data"), "realms": {"bench": {"spaces": decl}}})
    )
    settings = load_settings(cfg)
    out = {}
    for name in spaces:
        read = read_sources(settings, "bench", name)
        assert read.skipped == []
        out[name] = read.documents.sort("doc_order").to_dicts()
    return out


def _write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _lme_raw() -> list[dict[str, Any]]:
    return json.loads(LME.read_text(encoding="utf-8"))


# -- LongMemEval --------------------------------------------------------------------------------


def test_longmemeval_fixture_loads_as_typed_instances() -> None:
    instances, guard = load_longmemeval(LME)
    assert [(i.question_id, i.question_type, i.answerable) for i in instances] == [
        ("fx_ssu_1", "single-session-user", True),
        ("fx_ku_1", "knowledge-update", True),
        ("fx_tr_1_abs", "temporal-reasoning", False),
    ]
    assert instances[1].answer == "4"  # published answers may be numbers: read as text
    assert instances[0].haystack_sessions[0][0].role == "user"
    assert (guard.reportable, guard.items, guard.summary()) == (True, 3, "LongMemEval: reportable (3 items)")


def test_longmemeval_sessions_become_documents_in_date_order() -> None:
    instances, _ = load_longmemeval(LME)
    ssu, ku, _abs = instances
    # the file lists fx_s_b (05/28) before fx_s_a (05/20): documents follow the dates
    docs = ssu.documents()
    assert [(d.doc_key, d.order) for d in docs] == [("fx_ssu_1/fx_s_a", "0"), ("fx_ssu_1/fx_s_b", "1")]
    assert docs[1].title == "Session fx_s_b (2023/05/28 (Sun) 19:40)"
    assert docs[1].text.startswith(
        "user: I finally adopted a dog last week, a beagle named Biscuit.\nassistant: "
    )
    assert "has_answer" not in docs[1].text
    assert docs[1].metadata == {
        "session_id": "fx_s_b",
        "session_date": "2023-05-28T19:40:00",
        "has_answer": True,
    }
    assert docs[0].metadata["has_answer"] is False
    # two sessions at the same minute keep the file's order
    assert [d.doc_key.split("/")[1] for d in ku.documents()] == ["fx_s_c", "fx_s_d", "fx_s_e"]


def test_longmemeval_documents_are_read_by_a_space_one_space_per_instance(tmp_path: Path) -> None:
    instances, _ = load_longmemeval(LME)
    read = _read_as_spaces(tmp_path, {i.question_id: i.documents() for i in instances})
    rows = read["fx_ssu_1"]
    assert [(r["doc_key"], r["title"], r["doc_order"]) for r in rows] == [
        ("fx_ssu_1/fx_s_a", "Session fx_s_a (2023/05/20 (Sat) 02:21)", 0),
        ("fx_ssu_1/fx_s_b", "Session fx_s_b (2023/05/28 (Sun) 19:40)", 1),
    ]
    assert rows[1]["text"] == instances[0].documents()[1].text
    assert json.loads(rows[1]["metadata"])["order"] == "1"
    assert [r["doc_key"] for r in read["fx_ku_1"]] == ["fx_ku_1/fx_s_c", "fx_ku_1/fx_s_d", "fx_ku_1/fx_s_e"]
    assert len(read["fx_tr_1_abs"]) == 1


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda i: i.pop("question"), "question: Field required"),
        (
            lambda i: i["haystack_dates"].pop(),
            "2 haystack_sessions but 2 haystack_session_ids and 1 haystack_dates",
        ),
        (
            lambda i: i.update(haystack_dates=["2023-05-28", i["haystack_dates"][1]]),
            "date '2023-05-28' is not in LongMemEval's format",
        ),
        (lambda i: i["haystack_sessions"][0][0].pop("role"), "haystack_sessions.0.0.role: Field required"),
        (
            lambda i: i.update(answer_session_ids=["nope"]),
            "answer_session_ids ['nope'] are not among the haystack sessions",
        ),
        (
            lambda i: i.update(haystack_sessions=[], haystack_session_ids=[], haystack_dates=[]),
            "haystack_sessions is empty",
        ),
    ],
)
def test_a_malformed_longmemeval_instance_is_a_clear_error_naming_it(
    tmp_path: Path, change, reason: str
) -> None:  # type: ignore[no-untyped-def]
    raw = _lme_raw()
    change(raw[0])
    path = _write_json(tmp_path / "lme.json", raw)
    with pytest.raises(BenchmarkFormatError) as err:
        load_longmemeval(path)
    assert err.value.where == f"{path} instance fx_ssu_1" and reason in err.value.reason
    assert str(err.value).startswith(f"{path} instance fx_ssu_1: ")


def test_longmemeval_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(BenchmarkFormatError, match="is not a JSON list of instances"):
        load_longmemeval(_write_json(tmp_path / "obj.json", {"question_id": "x"}))
    (tmp_path / "bad.json").write_text("[{", encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match="cannot be read as JSON"):
        load_longmemeval(tmp_path / "bad.json")
    raw = _lme_raw()
    raw[2]["question_id"] = "fx_ssu_1"
    with pytest.raises(BenchmarkFormatError, match=r"question_id repeated: \['fx_ssu_1'\]"):
        load_longmemeval(_write_json(tmp_path / "dupe.json", raw))
    raw = _lme_raw()
    raw[1] = ["not", "an", "object"]
    with pytest.raises(BenchmarkFormatError, match="instance #1: is not a JSON object"):
        load_longmemeval(_write_json(tmp_path / "list.json", raw))


def test_excluded_items_make_a_run_non_reportable_and_are_listed(tmp_path: Path) -> None:
    raw = _lme_raw()
    raw[1]["haystack_dates"] = ["yesterday"] * 3
    instances, guard = load_longmemeval(_write_json(tmp_path / "lme.json", raw), strict=False)
    assert [i.question_id for i in instances] == ["fx_ssu_1", "fx_tr_1_abs"]
    assert guard.reportable is False and list(guard.excluded) == ["fx_ku_1"]
    # the harness excludes an item of its own: a session both extraction prompts refused (§8.2)
    guard.exclude("fx_tr_1_abs", "both extraction prompts refused session fx_s_f")
    assert guard.report()["scored"] == 1 and guard.report()["reportable"] is False
    summary = guard.summary()
    assert summary.startswith("LongMemEval: NOT reportable — 2 of 3 items excluded: fx_ku_1 (malformed: ")
    assert summary.endswith("fx_tr_1_abs (both extraction prompts refused session fx_s_f)")
    # the clean fixture with one harness exclusion is not reportable either, until that count is zero
    _, clean = load_longmemeval(LME)
    clean.exclude("fx_ssu_1", "refused")
    assert not clean.reportable
    clean.excluded.clear()
    assert clean.reportable


def test_longmemeval_abstention_is_scored_as_a_refusal() -> None:
    instances, _ = load_longmemeval(LME)
    abs_q = instances[2]
    assert (
        score_strict(
            "You never told me about buying a violin, so I cannot answer that.",
            abs_q.answer,
            answerable=abs_q.answerable,
        ).f1
        == 1.0
    )
    assert score_strict("23 days before the wedding.", abs_q.answer, answerable=abs_q.answerable).f1 == 0.0


# -- ECT-QA -------------------------------------------------------------------------------------


def test_ectqa_corpus_loads_plain_and_gzipped(tmp_path: Path) -> None:
    transcripts, guard = load_ectqa_corpus(CORPUS)
    assert guard.reportable and len(transcripts) == 8
    t = transcripts[0]
    assert (t.company_name, t.stock_code, t.key, t.period) == (
        "Acme Semiconductor Corp.",
        "ACME",
        "information technology-ACME-2022-q1",
        "2022-Q1",
    )
    doc = t.document()
    assert (doc.doc_key, doc.title, doc.order) == (
        "information technology-ACME-2022-q1",
        "Acme Semiconductor Corp. 2022-Q1 earnings call",
        "2022-Q1 ACME",
    )
    assert doc.text == t.cleaned_content and not doc.text.startswith("Operator")  # cleaned, not raw
    gz = tmp_path / "base.jsonl.gz"
    with CORPUS.open("rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert [x.key for x in load_ectqa_corpus(gz)[0]] == [x.key for x in transcripts]


def test_ectqa_raw_content_is_the_fallback_text(tmp_path: Path) -> None:
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    rec = json.loads(lines[0]) | {"cleaned_content": ""}
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    [t], _ = load_ectqa_corpus(path)
    assert t.document().text.startswith("Operator: Welcome.")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"quarter": "q5"}, "quarter: String should match pattern"),
        ({"year": "22"}, "year: String should match pattern"),
        ({"cleaned_content": "", "raw_content": None}, "neither cleaned_content nor raw_content has text"),
        ({"stock_code": None}, "stock_code: Input should be a valid string"),
    ],
)
def test_a_malformed_transcript_is_an_error_naming_file_and_line(
    tmp_path: Path, change: dict, reason: str
) -> None:
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    lines[2] = json.dumps(json.loads(lines[2]) | change)
    path = tmp_path / "base.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(BenchmarkFormatError) as err:
        load_ectqa_corpus(path)
    assert err.value.where == f"{path} line 3 (base:3)" and reason in err.value.reason
    transcripts, guard = load_ectqa_corpus(path, strict=False)
    assert len(transcripts) == 7 and list(guard.excluded) == ["base:3"] and not guard.reportable


def test_ectqa_corpus_file_errors(tmp_path: Path) -> None:
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    (tmp_path / "dupe.jsonl").write_text("\n".join([*lines, lines[0]]) + "\n", encoding="utf-8")
    with pytest.raises(
        BenchmarkFormatError, match=r"transcripts repeated: \['information technology-ACME-2022-q1'\]"
    ):
        load_ectqa_corpus(tmp_path / "dupe.jsonl")
    (tmp_path / "junk.jsonl").write_text(lines[0] + "\n{not json\n", encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r"line 2 \(junk:2\): Expecting property name"):
        load_ectqa_corpus(tmp_path / "junk.jsonl")
    with pytest.raises(BenchmarkFormatError, match="cannot be read"):
        load_ectqa_corpus(tmp_path / "missing.jsonl.gz")


def test_ectqa_questions_load_with_their_table_11_categories() -> None:
    questions, guard = load_ectqa_questions(QUESTIONS)
    assert guard.reportable
    assert [(q.id, q.category, q.answerable, q.companies) for q in questions] == [
        ("local_base:1", "multi-time", True, ["ACME"]),
        ("local_base:2", "single-time", True, ["ACME"]),
        ("local_base:3", "relative-time", True, ["BRCH"]),
        ("local_base:4", "cross-company", True, ["ACME", "BRCH"]),
        ("local_base:5", "unanswerable", False, []),
        ("local_base:6", "unanswerable", False, []),
    ]
    transcripts, _ = load_ectqa_corpus(CORPUS)
    keys = {t.key for t in transcripts}
    assert all(set(q.evidence_keys) <= keys for q in questions)  # evidence names the documents it cites
    assert questions[0].evidence_keys == [f"information technology-ACME-2022-q{n}" for n in (1, 2, 3, 4)]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"evidence_list": []}, "an answerable question has an empty evidence_list"),
        ({"question_type": "sometime query"}, "unknown question_type 'sometime query'"),
        ({"num_hops": -1}, "num_hops: Input should be greater than or equal to 0"),
        (
            {"evidence_list": [{"stock_code": "ACME", "ect_filename": "../x.txt"}]},
            "ect_filename: String should match pattern",
        ),
    ],
)
def test_a_malformed_question_is_an_error_naming_it(tmp_path: Path, change: dict, reason: str) -> None:
    lines = QUESTIONS.read_text(encoding="utf-8").splitlines()
    lines[1] = json.dumps(json.loads(lines[1]) | change)
    path = tmp_path / "local_base.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match="local_base:2") as err:
        load_ectqa_questions(path)
    assert reason in err.value.reason
    questions, guard = load_ectqa_questions(path, strict=False)
    assert [q.id for q in questions] == [
        "local_base:1",
        "local_base:3",
        "local_base:4",
        "local_base:5",
        "local_base:6",
    ]
    assert list(guard.excluded) == ["local_base:2"] and "local_base:2" in guard.summary()


def test_ectqa_spaces_one_per_company_plus_combined_read_in_chronological_order(tmp_path: Path) -> None:
    transcripts, _ = load_ectqa_corpus(CORPUS)
    spaces = ectqa_spaces(transcripts)
    assert sorted(spaces) == ["acme", "all", "brch"]
    read = _read_as_spaces(tmp_path, spaces)
    assert [r["doc_key"] for r in read["acme"]] == [
        f"information technology-ACME-2022-q{n}" for n in (1, 2, 3, 4)
    ]
    assert [r["doc_order"] for r in read["acme"]] == [0, 1, 2, 3]
    combined = [
        r["doc_key"].split("-", 1)[1] for r in read["all"]
    ]  # quarter by quarter, companies side by side
    assert combined == [f"{c}-2022-q{n}" for n in (1, 2, 3, 4) for c in ("ACME", "BRCH")]
    assert read["brch"][3]["title"] == "Birch Retail Inc. 2022-Q4 earnings call"
    meta = json.loads(read["brch"][3]["metadata"])
    assert (meta["order"], meta["line"]) == ("2022-Q4 BRCH", 4)


def test_per_company_document_counts_are_checked_against_the_expected(tmp_path: Path) -> None:
    transcripts, _ = load_ectqa_corpus(CORPUS)
    questions, guard = load_ectqa_questions(QUESTIONS)
    needed = {c for q in questions for c in q.companies}
    assert check_company_counts(guard, company_counts(transcripts), expected=4, needed=needed).reportable
    # the paper's 16 quarters per company: both fixture companies fall short and the run is not reportable
    sixteen = check_company_counts(RunGuard("ECT-QA", 6), company_counts(transcripts), needed=needed)
    assert sixteen.count_mismatches == {"ACME": (4, 16), "BRCH": (4, 16)} and not sixteen.reportable
    assert (
        sixteen.summary()
        == "ECT-QA: NOT reportable — document counts differ: ACME has 4 of 16, BRCH has 4 of 16"
    )
    # one transcript missing, and a company the questions need that was never indexed (§8.11)
    partial = check_company_counts(
        RunGuard("ECT-QA", 6), company_counts(transcripts[1:4]), expected=4, needed=[*needed, "CINF"]
    )
    assert partial.count_mismatches == {"ACME": (3, 4), "BRCH": (0, 4), "CINF": (0, 4)}
    assert partial.report()["count_mismatches"]["ACME"] == {"found": 3, "expected": 4}


def test_fixture_questions_score_end_to_end_with_scripted_answers() -> None:
    questions, _ = load_ectqa_questions(QUESTIONS)
    answers = {
        "local_base:1": "Gross margin was 33.9%, 33.6%, 31.7% and 32.0% in the four quarters of 2022 [1][2].",
        "local_base:2": "Free cash flow was $250 million in 2022-Q2.",
        "local_base:3": "Operating margin peaked in **Q4 2022** at 9.4%, ahead of Q2 2022 (9.0%).",
        "local_base:4": "In 2022-Q4 Acme's gross margin was 32.3% and Birch's operating margin 9.4%.",
        "local_base:5": "The transcripts end in 2022, so margins after 2026-Q1 cannot be determined.",
        "local_base:6": "Acme had 40 EMEA stores in 2022-Q3.",
    }
    scores = {q.id: score_strict(answers[q.id], q.answer, answerable=q.answerable) for q in questions}
    assert {k: (s.mode, s.f1) for k, s in scores.items()} == {
        "local_base:1": ("figures", 0.75),
        "local_base:2": ("figures", 1.0),
        "local_base:3": ("periods", 1.0),
        "local_base:4": ("figures", 1.0),
        "local_base:5": ("unanswerable", 1.0),
        "local_base:6": ("unanswerable", 0.0),
    }
    assert sum(bool(s.correct) for s in scores.values()) == 5  # accuracy 5/6 at F1 ≥ 0.60
