"""``pgrag status``, ``pgrag list``, ``pgrag lineage``, ``pgrag --version`` and the sources of ``pgrag query``
(issue 16 items 4–5) on a real indexed space: every number printed is checked against the database rows."""

from __future__ import annotations

import json
import re
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg import sql
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.pipeline import INDEX_STAGES
from pgrag_dag.store.identifiers import qualified
from tests.fix_corpus import SmallCorpus, extraction_answer

runner = CliRunner()
QUESTION = "Who worked with Charles Babbage?"


def synthesis_or_extraction(messages: list[dict[str, str]]) -> str:
    """The fixture's extraction model, and for a synthesis prompt an answer citing passages 1 and 2."""
    if messages[0]["content"].startswith("You answer a question"):
        return "Ada Lovelace worked with Charles Babbage [1]. The Analytical Engine was never built [2]."
    return extraction_answer(messages)


@pytest.fixture
def indexed(small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch) -> SmallCorpus:
    """The small corpus indexed through the CLI, answering synthesis prompts too."""
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    small_corpus.server.answer = synthesis_or_extraction
    out = runner.invoke(app, ["index", f"{realm}.main"])
    assert out.exit_code == 0, out.output
    return small_corpus


def _one(conn: psycopg.Connection, query: str, realm: str, *tables: str, args: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(sql.SQL(query).format(*(qualified(realm, t) for t in tables)), args).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row[0]


def _synthesis_prompts(corpus: SmallCorpus) -> list[dict[str, Any]]:
    return [
        r["body"]
        for r in corpus.chat_requests()
        if r["body"]["messages"][0]["content"].startswith("You answer")
    ]


def test_version_comes_from_the_package_metadata() -> None:
    out = runner.invoke(app, ["--version"])
    assert out.exit_code == 0 and out.stdout == f"pgrag {version('pgrag-dag')}\n"


def test_query_prints_the_answer_then_every_passage_the_context_numbered(
    indexed: SmallCorpus, realm: str, conn: psycopg.Connection
) -> None:
    out = runner.invoke(app, ["query", QUESTION, "--realm", realm, "--space", "main"])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert (
        lines[0] == "Ada Lovelace worked with Charles Babbage [1]. The Analytical Engine was never built [2]."
    )
    # the test session embeds by word hashing: the answer says, once, that its retrieval is weak
    assert (
        out.stderr.count("warning: the embedder is hashing-sha256:") == 1 and "far below BM25" in out.stderr
    )
    assert lines[1:3] == ["", "Sources:"]
    # the numbering the model saw: the References list of the synthesis prompt actually sent
    prompt = _synthesis_prompts(indexed)[-1]["messages"][1]["content"]
    refs = re.findall(
        r"^\[(\d+)\] (.*) \((.+), chunk (\d+)\)$", prompt.split("References:\n", 1)[1], re.MULTILINE
    )
    assert len(refs) >= 2
    printed = lines[3:]
    assert len(printed) == 2 * len(refs)  # a heading and an excerpt line per numbered passage, nothing else
    for i, (n, title, doc_key, chunk) in enumerate(refs):
        head, excerpt = printed[2 * i], printed[2 * i + 1]
        shown_title = f" · {title}" if title != doc_key else ""
        cited = " · cited" if n in ("1", "2") else ""
        assert head == f"[{n}] {doc_key}{shown_title} · chunk {chunk}{cited}"
        text = _one(
            conn,
            "SELECT text FROM {} WHERE space = 'main' AND doc_key = %s AND chunk_index = %s",
            realm,
            "documents",
            args=(doc_key, int(chunk)),
        )
        flat = " ".join(text.split())
        assert excerpt.startswith("    ") and len(excerpt) <= 4 + 160
        assert flat.startswith(excerpt[4:].removesuffix(" [...]"))
        assert excerpt.endswith(" [...]") == (len(flat) > 160)


def test_a_streamed_answer_arrives_in_pieces_and_prints_as_the_unstreamed_one(
    indexed: SmallCorpus, realm: str, conn: psycopg.Connection
) -> None:
    ask = ["query", QUESTION, "--realm", realm, "--space", "main"]
    plain = runner.invoke(app, ask)
    assert plain.exit_code == 0, plain.output
    assert _synthesis_prompts(indexed)[-1].get("stream") is None
    # forget the cached answer: the streamed call must reach the model
    removed = conn.execute(
        "DELETE FROM pgrag__control.llm_cache WHERE model = %s AND purpose = 'synthesis'", (indexed.model,)
    ).rowcount
    assert removed == 1
    streamed = runner.invoke(app, [*ask, "--stream"])
    assert streamed.exit_code == 0, streamed.output
    assert _synthesis_prompts(indexed)[-1]["stream"] is True
    assert streamed.stdout == plain.stdout
    # the streamed text was cached whole: the next (streamed) call asks no model and prints the same at once
    cached = _one(
        conn,
        "SELECT count(*) FROM pgrag__control.llm_cache WHERE model = %s AND purpose = 'synthesis' "
        "AND response = %s",
        realm,
        args=(indexed.model, plain.stdout.splitlines()[0]),
    )
    assert cached == 1
    asked = len(_synthesis_prompts(indexed))
    again = runner.invoke(app, [*ask, "--stream"])
    assert again.stdout == plain.stdout and len(_synthesis_prompts(indexed)) == asked


def test_filters_that_match_nothing_warn_once_on_stderr(indexed: SmallCorpus, realm: str) -> None:
    ask = ["query", QUESTION, "--realm", realm, "--space", "main", "--json"]
    out = runner.invoke(app, [*ask, "--relation-type", "wroked_with", "--relation-type", "designed"])
    assert out.exit_code == 0, out.output
    warning = "relation type 'wroked_with' matches no relation of space 'main' (its most frequent: "
    assert out.stderr.count(warning) == 1 and out.stderr.startswith("warning: ")
    assert json.loads(out.stdout)["warnings"][0].startswith(warning)
    assert "designed" in out.stderr.split("its most frequent: ", 1)[1]
    early = runner.invoke(app, [*ask, "--as-believed-at", "2001-01-01T00:00:00"])
    assert early.exit_code == 0, early.output
    data = json.loads(early.stdout)
    assert data["entities"] == [] and data["relations"] == [] and data["chunks"] == []
    assert (
        early.stderr.count(
            "warning: as_believed_at 2001-01-01T00:00:00+00:00 is before anything of space 'main' "
            "was believed (its first chunk: "
        )
        == 1
    )
    fine = runner.invoke(app, [*ask, "--relation-type", "worked_with"])
    assert fine.exit_code == 0 and fine.stderr == "" and json.loads(fine.stdout)["warnings"] == []


def test_status_counts_equal_the_rows_of_the_database(
    indexed: SmallCorpus, realm: str, conn: psycopg.Connection
) -> None:
    out = runner.invoke(app, ["status", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["indexed"] is True and data["next"] is None
    mine = next(r for r in data["realms"] if r["realm"] == realm)
    assert mine["registered"] and mine["embedding"] == {
        "model": "hashing-sha256",
        "dim": 384,
        "convention": "symmetric",
    }
    (space,) = mine["spaces"]
    count = lambda q, *t: _one(conn, q, realm, *t)  # noqa: E731
    assert space["space"] == "main" and space["configured"] and space["indexed"]
    assert (
        space["documents"]
        == count("SELECT count(DISTINCT doc_key) FROM {} WHERE space = 'main'", "documents")
        == 2
    )
    assert space["chunks"] == count("SELECT count(*) FROM {} WHERE space = 'main'", "documents")
    assert (
        space["entities"]["live"]
        == count("SELECT count(*) FROM {} WHERE dormant_since IS NULL", "entities")
        > 0
    )
    rel = space["relations"]
    assert rel["live"] == count("SELECT count(*) FROM {} WHERE dormant_since IS NULL", "relations") > 0
    assert (
        rel["negated"]
        == count("SELECT count(*) FROM {} WHERE negated AND dormant_since IS NULL", "relations")
        == 1
    )
    assert rel["current"] + rel["superseded"] == rel["live"]
    com = space["communities"]
    assert com["total"] == count("SELECT count(*) FROM {}", "communities") >= 1 and com["stale"] is False
    assert {int(k): v for k, v in com["levels"].items()} == dict(
        conn.execute(
            sql.SQL("SELECT level, count(*) FROM {} GROUP BY level").format(qualified(realm, "communities"))
        ).fetchall()
    )
    stages = dict(
        conn.execute(
            sql.SQL("SELECT stage, rows_changed FROM {} WHERE space = 'main'").format(
                qualified(realm, "stage_state")
            )
        ).fetchall()
    )
    assert [(s["stage"], s["rows_changed"]) for s in space["stages"]] == [
        (s, stages[s]) for s in INDEX_STAGES
    ]
    rows = conn.execute("SELECT count(*) FROM pgrag__control.llm_cache").fetchone()[0]  # type: ignore[index]
    assert data["llm_cache"]["rows"] == rows > 0 and data["llm_cache"]["bytes"] > 0

    human = runner.invoke(app, ["status"])
    assert human.exit_code == 0, human.output
    text = human.stdout
    assert f"realm {realm}: embedding hashing-sha256 (384 dimensions, symmetric)" in text
    assert f"  space main: 2 documents, {space['chunks']} chunks\n" in text
    assert (
        f"    relations: {rel['current']} current, {rel['superseded']} superseded, 1 negated, 0 dormant\n"
        in text
    )
    assert f"LLM response cache: {rows} responses, " in text and "nothing is indexed yet" not in text
    assert (
        space["without_vector"] == {"documents": 0, "entities": 0, "relations": 0}
        and "    vectors:" not in text
    )
    # vectors an interrupted embeddings stage never wrote: said, with the command that embeds them
    conn.execute(
        sql.SQL("UPDATE {} SET embedding = NULL WHERE id IN (SELECT id FROM {} ORDER BY id LIMIT 2)").format(
            qualified(realm, "entities"), qualified(realm, "entities")
        )
    )
    text = runner.invoke(app, ["status"]).stdout
    assert (
        f"    vectors: 2 entities have none yet — vector search cannot find them; `pgrag index {realm}.main` "
        "embeds them\n"
    ) in text


def test_status_on_a_new_data_directory_says_what_to_run_and_creates_nothing(
    tmp_path: Path, pg_dsn: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = f"fresh_{uuid.uuid4().hex[:8]}"
    cfg = {
        "data_dir": str(tmp_path / "data"),
        "realms": {fresh: {"spaces": {"docs": {"sources": [{"path": "docs"}]}}}},
    }
    path = tmp_path / "pgrag.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    monkeypatch.setenv("PGRAG_CONFIG", str(path))
    out = runner.invoke(app, ["status"])
    assert out.exit_code == 0, out.output
    assert f"realm {fresh}: not indexed yet\n  space docs: not indexed yet\n" in out.stdout
    assert out.stdout.rstrip().endswith(f"nothing is indexed yet; next: pgrag index {fresh}.docs")
    assert not (tmp_path / "data").exists()  # no embedded server was started, no directory made
    # on a live database too, the configured realm is only reported, never registered or created
    monkeypatch.setenv("PGRAG_DATABASE_URL", pg_dsn)
    data = json.loads(runner.invoke(app, ["status", "--json"]).stdout)
    mine = next(r for r in data["realms"] if r["realm"] == fresh)
    assert mine == {
        "realm": fresh,
        "registered": False,
        "embedding": None,
        "schema_version": None,
        "indexes_to_build": [],
        "spaces": [{"space": "docs", "configured": True, "indexed": False}],
    }
    listed = runner.invoke(app, ["list", "entities", f"{fresh}.docs"])
    assert listed.exit_code == 2 and listed.output == (
        f"error: QueryError: space {fresh}.docs has not been indexed yet; run pgrag index {fresh}.docs\n"
    )
    listed = runner.invoke(app, ["list", "entities", f"{fresh}.nope"])  # neither indexed nor declared
    assert listed.exit_code == 2 and listed.output == (
        f"error: QueryError: space {fresh}.nope is neither indexed nor "
        f"in the configuration (declared: {fresh}.docs)\n"
    )
    assert conn.execute(
        "SELECT count(*) FROM pgrag__control.realms WHERE realm = %s", (fresh,)
    ).fetchone() == (0,)
    assert conn.execute("SELECT to_regnamespace(%s)", (f"pgrag_{fresh}",)).fetchone() == (None,)


def _page(args: list[str]) -> dict[str, Any]:
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_list_pages_filters_and_totals_match_the_database(
    indexed: SmallCorpus, realm: str, conn: psycopg.Connection
) -> None:
    part = f"{realm}.main"
    live = [
        n
        for (n,) in conn.execute(
            sql.SQL("SELECT name FROM {} WHERE dormant_since IS NULL ORDER BY name, id").format(
                qualified(realm, "entities")
            )
        ).fetchall()
    ]
    everything = _page(["list", "entities", part, "--sort", "name"])
    assert (everything["total"], [e["name"] for e in everything["items"]]) == (len(live), live)
    assert set(everything) == {"kind", "realm", "space", "total", "offset", "limit", "items"}
    # paging: pages of two, concatenated, are the whole list in the same order; past the end is empty
    pages = [
        _page(["list", "entities", part, "--sort", "name", "--limit", "2", "--offset", str(o)])
        for o in range(0, len(live) + 2, 2)
    ]
    assert [e["name"] for p in pages for e in p["items"]] == live and pages[-1]["items"] == []
    human = runner.invoke(app, ["list", "entities", part, "--sort", "name", "--limit", "2", "--offset", "2"])
    assert human.stdout.splitlines()[0] == f"entities of {part}: 3–4 of {len(live)}"
    assert len(human.stdout.splitlines()) == 3 and live[2] in human.stdout.splitlines()[1]
    last = runner.invoke(app, ["list", "entities", part, "--offset", str(len(live))])
    assert last.stdout == f"entities of {part}: none of {len(live)} past offset {len(live)}\n"
    # filters: a name substring (names and aliases, any case), a type, dormant entities on request
    babbage = _page(["list", "entities", part, "--name", "BABB"])
    assert [e["name"] for e in babbage["items"]] == ["Charles Babbage"] and babbage["items"][0][
        "mentions"
    ] > 0
    people = _page(["list", "entities", part, "--type", "person"])
    assert sorted(e["name"] for e in people["items"]) == ["Ada Lovelace", "Charles Babbage"]
    conn.execute(
        sql.SQL("UPDATE {} SET dormant_since = now() WHERE name = 'London'").format(
            qualified(realm, "entities")
        )
    )
    assert "London" not in [e["name"] for e in _page(["list", "entities", part])["items"]]
    dormant = _page(["list", "entities", part, "--include-dormant", "--name", "london"])["items"]
    assert [(e["name"], e["dormant"]) for e in dormant] == [("London", True)]

    rels = _page(["list", "relations", part, "--sort", "name"])
    db_rels = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE dormant_since IS NULL AND superseded_by IS NULL").format(
            qualified(realm, "relations")
        )
    ).fetchone()[0]  # type: ignore[index]
    assert rels["total"] == len(rels["items"]) == db_rels
    keys = [(r["subject"], r["predicate"], r["object"], r["id"]) for r in rels["items"]]
    assert keys == sorted(keys)
    worked = _page(["list", "relations", part, "--predicate", "WORKED_WITH"])["items"]
    assert [(r["subject"], r["object"]) for r in worked] == [("Ada Lovelace", "Charles Babbage")]
    assert {r["predicate"] for r in _page(["list", "relations", part, "--name", "lovelace"])["items"]} == {
        "worked_with",
        "wrote_notes_on",
    }
    # a superseded edge is listed only on request
    first, second = rels["items"][0]["id"], rels["items"][1]["id"]
    conn.execute(
        sql.SQL("UPDATE {} SET superseded_by = %s, t_expired = now() WHERE id = %s").format(
            qualified(realm, "relations")
        ),
        (second, first),
    )
    assert _page(["list", "relations", part])["total"] == db_rels - 1
    marked = {
        r["id"]: r["superseded"] for r in _page(["list", "relations", part, "--include-superseded"])["items"]
    }
    assert marked[first] is True and len(marked) == db_rels

    docs = _page(["list", "documents", part])
    chunks = dict(
        conn.execute(
            sql.SQL("SELECT doc_key, count(*) FROM {} GROUP BY doc_key").format(qualified(realm, "documents"))
        ).fetchall()
    )
    assert [(d["doc_key"], d["chunks"]) for d in docs["items"]] == sorted(chunks.items())
    assert [d["doc_key"] for d in _page(["list", "documents", part, "--name", "lovelace"])["items"]] == [
        "02_lovelace.txt"
    ]

    coms = _page(["list", "communities", part, "--level", "0", "--sort", "level"])
    level0 = conn.execute(
        sql.SQL("SELECT id FROM {} WHERE level = 0 ORDER BY size DESC, id").format(
            qualified(realm, "communities")
        )
    ).fetchall()
    assert [c["id"] for c in coms["items"]] == [i for (i,) in level0] and coms["total"] == len(level0)
    assert _page(["list", "communities", part, "--level", "7"])["total"] == 0


def test_lineage_prints_a_tree_with_counts_and_keeps_its_json(indexed: SmallCorpus, realm: str) -> None:
    cid = _page(["list", "communities", f"{realm}.main", "--level", "0"])["items"][0]["id"]
    data = json.loads(runner.invoke(app, ["lineage", str(cid), "--realm", realm, "--json"]).stdout)
    assert set(data) == {"community", "entities", "relations", "chunks", "documents"}
    out = runner.invoke(app, ["lineage", str(cid), "--realm", realm, "--limit", "1"])
    assert out.exit_code == 0, out.output
    text = out.stdout
    assert text.startswith(f"community {cid} (level 0, space main): {data['community']['title']}")
    for level in ("entities", "relations", "chunks", "documents"):
        n = len(data[level])
        assert f"{level} ({n})" in text
        if n > 1:
            assert f"… and {n - 1} more" in text
    assert data["entities"][0]["name"] in text
    assert len(data["entities"]) < 2 or data["entities"][1]["name"] not in text.split("relations (")[0]
    # no --realm: the configuration's first realm, as for query
    assert runner.invoke(app, ["lineage", str(cid), "--limit", "1"]).stdout == text
    # a realm the configuration does not declare is unknown, not a realm "declaring no space" (a trial)
    out = runner.invoke(app, ["query", QUESTION, "--realm", "nosuch", "--json"])
    assert out.exit_code == 2 and out.stdout == ""
    assert out.stderr == (
        "error: ConfigurationError: unknown realm 'nosuch': the configuration (PGRAG_CONFIG or "
        f"./pgrag.yaml) declares realm {realm}; an indexed realm it does not declare is read with --realm "
        "and --space\n"
    )


def test_cassette_export_refuses_a_missing_directory(indexed: SmallCorpus, tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "cassette.jsonl"
    out = runner.invoke(app, ["cassette", "export", str(target)])
    assert out.exit_code == 2 and out.output.count("\n") == 1
    assert f"directory {target.parent} does not exist" in out.output
    assert not (tmp_path / "no").exists()
    out = runner.invoke(app, ["cassette", "export", str(tmp_path)])  # a directory, not a file: one line
    assert out.exit_code == 2 and out.output.count("\n") == 1 and f"{tmp_path} is a directory" in out.output
    out = runner.invoke(app, ["cassette", "import", str(tmp_path)])
    assert out.exit_code == 2 and f"cassette {tmp_path} is a directory, not a JSONL file" in out.output


def _column(conn: psycopg.Connection, query: str, realm: str, *tables: str) -> list[Any]:
    composed = sql.SQL(query).format(*(qualified(realm, t) for t in tables))  # type: ignore[arg-type]
    return [r[0] for r in conn.execute(composed).fetchall()]


def test_listings_default_to_what_a_user_scans_for_and_top_shows_all_three(
    indexed: SmallCorpus, realm: str, conn: psycopg.Connection
) -> None:
    part = f"{realm}.main"
    # entities: most mentioned first (chunks mentioning each, counted in doc_mentions), ties by name
    by_mentions = _column(
        conn,
        """SELECT e.name FROM {} e LEFT JOIN {} m ON m.entity_id = e.id WHERE e.dormant_since IS NULL
        GROUP BY e.id, e.name ORDER BY count(m.entity_id) DESC, e.name, e.id""",
        realm,
        "entities",
        "doc_mentions",
    )
    entities = _page(["list", "entities", part])["items"]
    assert [e["name"] for e in entities] == by_mentions
    mentions = [e["mentions"] for e in entities]
    assert mentions == sorted(mentions, reverse=True) and mentions[0] > mentions[-1]
    assert by_mentions != sorted(by_mentions)  # the order is not the alphabetical one in disguise
    # relations: heaviest first; communities: largest first over every level
    weights = [r["weight"] for r in _page(["list", "relations", part])["items"]]
    assert weights == sorted(weights, reverse=True) and weights[0] > weights[-1]
    heaviest = _column(
        conn,
        "SELECT max(weight) FROM {} WHERE dormant_since IS NULL AND superseded_by IS NULL",
        realm,
        "relations",
    )
    assert weights[0] == heaviest[0]
    sizes = [c["size"] for c in _page(["list", "communities", part])["items"]]
    assert sizes == sorted(_column(conn, "SELECT size FROM {}", realm, "communities"), reverse=True)
    bad = runner.invoke(app, ["list", "entities", part, "--sort", "weight"])
    assert bad.exit_code == 2 and "'weight' is not one of" in bad.output

    out = runner.invoke(app, ["top", part, "-n", "2"])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"{part} at a glance")
    head = lines.index(f"entities, most mentioned (2 of {len(by_mentions)}):")
    assert [line.split("  ")[-1].split(" (")[0] for line in lines[head + 1 : head + 3]] == by_mentions[:2]
    assert lines[head + 1].split()[0] == str(mentions[0])
    rel_at = next(i for i, line in enumerate(lines) if line.startswith("relations, heaviest (2 of "))
    assert float(lines[rel_at + 1].split()[0]) == weights[0]
    com_at = next(i for i, line in enumerate(lines) if line.startswith("communities, largest ("))
    assert int(lines[com_at + 1].split()[0]) == sizes[0]
    # one space configured: the partition may be left out
    assert runner.invoke(app, ["top", "-n", "2"]).stdout == out.stdout
    data = json.loads(runner.invoke(app, ["top", part, "-n", "2", "--json"]).stdout)
    assert [e["name"] for e in data["entities"]["items"]] == by_mentions[:2]


def test_a_refused_entity_deletion_gives_stoplist_yaml_that_refuses_the_name_once_pasted(
    indexed: SmallCorpus, realm: str, conn: psycopg.Connection
) -> None:
    part = f"{realm}.main"
    out = runner.invoke(app, ["delete", "entity", part, "london"])
    assert out.exit_code == 2 and "cannot delete entity 'London'" in out.stderr
    assert f"under realms → {realm} → spaces → main, set:  gates: " in out.stderr
    pasted = out.stderr.split("set:  ", 1)[1].split("  then run ", 1)[0]
    assert pasted == 'gates: [{name: "name_stoplist", options: {names: ["London"]}}]'
    assert out.stderr.rstrip().endswith(f"then run pgrag index {part}")
    # paste it where it says, as a user would, and index again
    cfg = yaml.safe_load(indexed.config.read_text())
    cfg["realms"][realm]["spaces"]["main"].update(yaml.safe_load(pasted))
    indexed.config.write_text(yaml.safe_dump(cfg))
    again = runner.invoke(app, ["index", part])
    assert again.exit_code == 0, again.output
    refused = conn.execute(
        sql.SQL("SELECT count(*), min(offending_value) FROM {} WHERE gate = 'name_stoplist'").format(
            qualified(realm, "gate_decisions")
        )
    ).fetchone()
    assert refused is not None and refused[0] > 0 and refused[1] == "London"
    assert _page(["list", "entities", part, "--name", "london"])["total"] == 0  # dormant now: no mention
    # with the gate in place, the next refusal adds to its list instead of a second gate
    out = runner.invoke(app, ["delete", "entity", part, "Ada Lovelace"])
    assert 'gates: [{name: "name_stoplist", options: {names: ["London", "Ada Lovelace"]}}]' in out.stderr


def test_a_type_that_matches_nothing_names_the_types_the_space_has(
    indexed: SmallCorpus, realm: str, conn: psycopg.Connection
) -> None:
    part = f"{realm}.main"
    types = dict(
        conn.execute(
            sql.SQL("SELECT entity_type, count(*) FROM {} WHERE dormant_since IS NULL GROUP BY 1").format(
                qualified(realm, "entities")
            )
        ).fetchall()
    )
    out = runner.invoke(app, ["list", "entities", part, "--type", "galaxy"])
    assert out.exit_code == 0 and out.stdout == f"entities of {part}: none of 0\n"
    listed = ", ".join(f"{t} ({n})" for t, n in sorted(types.items(), key=lambda kv: (-kv[1], kv[0])))
    assert out.stderr == f"no entity of type 'galaxy'; the types of {part}: {listed}\n"
    assert listed == "Artifact (2), Person (2), Organization (1), Place (1)"
    assert runner.invoke(app, ["list", "entities", part, "--type", "person"]).stderr == ""
