"""A full run of the graph stages in small batches decides what one batch decides (issue 30 item 3: bounded
memory). The space is built with the default batch sizes (one batch here), then recomputed in full with one
chunk per gating batch, one source entity per relations batch and decisions read two rows at a time
(resolution streams them): every decision — gate rows, entities, mentions, edges, supersession by group,
by negation and by a single-valued predicate on either side (one subject per object spans source entities,
so it is decided after the batches) — must come out as stored, so the recompute changes no row; and a first
build in such batches gives the graph one batch gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg import sql

from pgrag_dag.config import load_settings
from pgrag_dag.engine import Engine
from pgrag_dag.pipeline import graph_stages, index_documents, relation_batches
from pgrag_dag.store.identifiers import qualified
from tests.graph.test_supersession import _write, answer, novel  # noqa: F401  (the narrative corpus fixture)
from tests.graph_snapshot import graph_snapshot


def _graph(engine: Engine, realm: str) -> dict[str, Any]:
    """Every decided row with its id: gate decisions, edges (support, supersession, payload, dormancy) and
    post-resolution rejections."""
    with engine.connect() as conn:

        def rows(query: str, table: str) -> list[tuple[Any, ...]]:
            return conn.execute(sql.SQL(query).format(qualified(realm, table))).fetchall()

        return {
            "decisions": rows(
                "SELECT id, chunk_id, kind, name, subject, predicate, accepted, gate FROM {}",
                "gate_decisions",
            ),
            "relations": rows(
                """SELECT id, source_id, predicate, target_id, negated, chunk_ids, weight, rendered, payload,
                          superseded_by, t_expired, dormant_since IS NULL FROM {} ORDER BY id""",
                "relations",
            ),
            "entities": rows(
                "SELECT id, name, entity_type, description, aliases, merged_into, dormant_since IS NULL"
                " FROM {} ORDER BY id",
                "entities",
            ),
            "mentions": rows("SELECT chunk_id, entity_id FROM {} ORDER BY 1, 2", "doc_mentions"),
            "rejections": rows(
                "SELECT chunk_id, subject, object FROM {} ORDER BY 1, 2, 3", "resolution_rejections"
            ),
        }


def _books(root: Path, realm: str, *copies: str) -> Engine:
    """Three books stating an alliance reversed, a denial reversed, a captaincy and a residence changed
    (captain_of holds one subject per object in the narrative preset, lives_in one object per subject as
    declared here), in space ``books`` and in each of ``copies`` (the same sources)."""
    cfg = yaml.safe_load((root / "pgrag.yaml").read_text())
    spaces = cfg["realms"][realm]["spaces"]
    spaces["books"]["single_valued"] = {"lives_in": "object"}
    for c in copies:
        spaces[c] = dict(spaces["books"])
    (root / "pgrag.yaml").write_text(yaml.safe_dump(cfg))
    _write(root, "01_book.txt", "Athos is an ally of d'Artagnan.", "Aramis does not serve Richelieu.")
    _write(root, "02_book.txt", "Treville is the captain of the Musketeers.", "Porthos lives in Paris.")
    _write(
        root,
        "03_book.txt",
        "Athos is now an enemy of d'Artagnan.",
        "Aramis serves Richelieu.",
        "Athos is the captain of the Musketeers.",
        "Porthos lives in Pierrefonds.",
        "Rochefort serves Richelieu.",
    )
    return Engine.from_settings(load_settings(root / "pgrag.yaml"))


def _tiny_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """One chunk per gating batch, one source entity per relations batch, decisions read two at a time."""
    monkeypatch.setattr(graph_stages, "GATE_BATCH", 1)
    monkeypatch.setattr(relation_batches, "RELATION_BATCH", 1)
    monkeypatch.setattr(relation_batches, "READ_BATCH", 2)
    monkeypatch.setattr(graph_stages, "READ_BATCH", 2)  # resolution's reads


def test_a_full_run_in_batches_of_one_decides_what_one_batch_decides(
    novel, realm, pg_dsn, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    engine = _books(novel[0], realm, "copy")
    first = {r.stage: r.metadata for r in index_documents(engine, realm, "books", communities=False)}
    assert first["relations"]["mode"] == "full" and first["relations"]["batches"] == 1
    assert first["gated_triples"]["batches"] == 1
    assert first["relations"]["supersessions_by_reason"] == {"group": 1, "negation": 1, "single_valued": 2}
    before = _graph(engine, realm)

    _tiny_batches(monkeypatch)
    again = {
        r.stage: r.metadata for r in index_documents(engine, realm, "books", full=True, communities=False)
    }
    sources = len({r[1] for r in before["relations"]})
    assert again["gated_triples"]["batches"] == first["gated_triples"]["chunks_gated"] > 1
    assert again["relations"]["batches"] == sources > 3  # one source entity per batch
    for stage in ("gated_triples", "resolved_entities", "relations"):
        assert again[stage]["rows_changed"] == 0, stage
    assert again["relations"]["supersessions_by_reason"] == first["relations"]["supersessions_by_reason"]
    assert again["relations"]["supersession_examples"] == first["relations"]["supersession_examples"]
    assert _graph(engine, realm) == before

    # resolution folds the streamed records into vertices that only grow, so a rebuild cannot show a record
    # it missed: a first build of the same books in batches of one must give the graph one batch gives
    copy = {r.stage: r.metadata for r in index_documents(engine, realm, "copy", communities=False)}
    assert copy["resolved_entities"]["records_resolved"] == first["resolved_entities"]["records_resolved"] > 2
    assert copy["relations"]["batches"] == sources
    assert graph_snapshot(pg_dsn, realm, "copy") == graph_snapshot(pg_dsn, realm, "books")
