"""Temporal filters of the query path against real PostgreSQL (paper §5.3, §5.4, §7.2, §7.5).

Valid time (``as_of``) and belief time (``as_believed_at``) are applied inside every traversal
step: a path never walks through an excluded edge to reach a vertex that then presents as current.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgrag_dag import temporal
from pgrag_dag.errors import QueryError
from pgrag_dag.providers.embedding import HashingEmbedder
from pgrag_dag.query import QueryParam, QueryResult, query_data
from pgrag_dag.query.assembly import render_relation
from pgrag_dag.store import retrieval, schema

EMB = HashingEmbedder(384)
SPACE = "hist"


def _t(realm: str, table: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema.schema_for(realm)), sql.Identifier(table))


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


class _Graph:
    """Builds a small graph in one space with explicit validity and belief-time stamps."""

    def __init__(self, conn: psycopg.Connection, realm: str) -> None:
        self.conn, self.realm = conn, realm
        self.ids: dict[str, int] = {}

    def entity(self, name: str) -> int:
        row = self.conn.execute(
            sql.SQL("""INSERT INTO {} (space, name, entity_type, embedding, t_created)
                       VALUES (%s, %s, 'Concept', %s, %s) RETURNING id""").format(_t(self.realm, "entities")),
            (SPACE, name, EMB.embed_one(name), _utc("1990-01-01")),
        ).fetchone()
        assert row is not None
        self.ids[name] = int(row[0])
        return int(row[0])

    def rel(
        self,
        s: str,
        p: str,
        o: str,
        *,
        valid_from: str | None = None,
        valid_to: str | None = None,
        t_created: str | None = None,
        t_expired: str | None = None,
        superseded_by: int | None = None,
    ) -> int:
        for name in (s, o):
            if name not in self.ids:
                self.entity(name)
        payload = {k: v for k, v in (("valid_from", valid_from), ("valid_to", valid_to)) if v is not None}
        row = self.conn.execute(
            sql.SQL("""INSERT INTO {} (space, source_id, target_id, predicate, payload, weight,
                                       t_created, t_expired, superseded_by)
                       VALUES (%s, %s, %s, %s, %s, 1, %s, %s, %s) RETURNING id""").format(
                _t(self.realm, "relations")
            ),
            (
                SPACE,
                self.ids[s],
                self.ids[o],
                p,
                json.dumps(payload),
                _utc(t_created) if t_created else None,
                _utc(t_expired) if t_expired else None,
                superseded_by,
            ),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def supersede(self, old: int, new: int, at: str) -> None:
        self.conn.execute(
            sql.SQL("UPDATE {} SET superseded_by = %s, t_expired = %s WHERE id = %s").format(
                _t(self.realm, "relations")
            ),
            (new, _utc(at), old),
        )

    def chunk(self, key: str, text: str, *, t_created: str, embedded: bool, mentions: list[str]) -> int:
        row = self.conn.execute(
            sql.SQL("""INSERT INTO {} (space, doc_key, chunk_index, title, source, doc_order, text,
                                       content_hash, doc_hash, embedding, t_created)
                       VALUES (%s, %s, 0, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id""").format(
                _t(self.realm, "documents")
            ),
            (
                SPACE,
                key,
                key.title(),
                f"{key}.txt",
                len(self.ids),
                text,
                f"h-{key}",
                f"d-{key}",
                EMB.embed_one(text) if embedded else None,
                _utc(t_created),
            ),
        ).fetchone()
        assert row is not None
        for name in mentions:
            self.conn.execute(
                sql.SQL("INSERT INTO {} (space, chunk_id, entity_id) VALUES (%s, %s, %s)").format(
                    _t(self.realm, "doc_mentions")
                ),
                (SPACE, row[0], self.ids[name]),
            )
        self.ids[f"chunk:{key}"] = int(row[0])
        return int(row[0])


@pytest.fixture
def graph(conn: psycopg.Connection, realm: str) -> dict[str, int]:
    """Around the seed Ada Lovelace (every edge below starts at her unless said otherwise):

    valid time — knows Undated Friend (no period, no t_created: always valid, always known);
    lived_in Somerset [from 1625]; served Old King [until 1625-05]; member_of Period Club
    [1630..1640] and, beyond it, Period Club located_in Far Town (undated);
    belief time — ally_of Bob (2010, retracted 2020-01-01, superseded by) enemy_of Bob (2020-01-01);
    founded NewCo (2022) and, beyond it, NewCo based_in Newtown (no t_created: always known);
    visited Paris [from 2016] (2017);
    composed — partner_of Carol (2005, superseded 2019 by) rival_of Carol [from 2019] (2019), and
    beyond Carol, Carol owns Hidden Estate (undated, 2005).
    Chunks: two indexed 2010 (one embedded, one reached by mention only), two indexed 2022 (likewise).
    """
    g = _Graph(conn, realm)
    g.entity("Ada Lovelace")
    g.rel("Ada Lovelace", "knows", "Undated Friend")
    g.rel("Ada Lovelace", "lived_in", "Somerset", valid_from="1625", t_created="2005-01-01")
    g.rel("Ada Lovelace", "served", "Old King", valid_to="1625-05", t_created="2005-01-01")
    g.rel(
        "Ada Lovelace", "member_of", "Period Club", valid_from="1630", valid_to="1640", t_created="2005-01-01"
    )
    g.rel("Period Club", "located_in", "Far Town", t_created="2005-01-01")
    ally = g.rel("Ada Lovelace", "ally_of", "Bob", t_created="2010-01-01")
    enemy = g.rel("Ada Lovelace", "enemy_of", "Bob", t_created="2020-01-01")
    g.supersede(ally, enemy, "2020-01-01")
    g.rel("Ada Lovelace", "founded", "NewCo", t_created="2022-01-01")
    g.rel("NewCo", "based_in", "Newtown")
    g.rel("Ada Lovelace", "visited", "Paris", valid_from="2016", t_created="2017-01-01")
    partner = g.rel("Ada Lovelace", "partner_of", "Carol", t_created="2005-01-01")
    rival = g.rel("Ada Lovelace", "rival_of", "Carol", valid_from="2019", t_created="2019-01-01")
    g.supersede(partner, rival, "2019-01-01")
    g.rel("Carol", "owns", "Hidden Estate", t_created="2005-01-01")
    g.chunk(
        "old-notes",
        "Ada Lovelace wrote her notes.",
        t_created="2010-01-01",
        embedded=True,
        mentions=["Ada Lovelace"],
    )
    g.chunk(
        "old-letter",
        "A letter from the old days.",
        t_created="2010-01-01",
        embedded=False,
        mentions=["Ada Lovelace"],
    )
    g.chunk(
        "new-notes",
        "Ada Lovelace revisited, a later edition.",
        t_created="2022-01-01",
        embedded=True,
        mentions=["Ada Lovelace"],
    )
    g.chunk(
        "new-letter",
        "A letter indexed much later.",
        t_created="2022-01-01",
        embedded=False,
        mentions=["Ada Lovelace"],
    )
    return g.ids


def _ask(pg_dsn: str, realm: str, **param: Any) -> QueryResult:
    # the vector-seeded path these tests pin (the walk has tests/query/test_query_ppr.py)
    param.setdefault("graph_ranking", "mentions")
    param.setdefault("collapse_duplicates", False)
    param.setdefault("space", SPACE)
    param.setdefault("top_k", 1)
    param.setdefault("max_hops", 2)
    return query_data("Ada Lovelace", QueryParam(**param), dsn=pg_dsn, realm=realm, embedder=EMB)


def _triples(result: QueryResult) -> set[tuple[str, str, str]]:
    return {(r["subject"], r["predicate"], r["object"]) for r in result.relations}


def _predicates(result: QueryResult) -> set[str]:
    return {r["predicate"] for r in result.relations}


def _names(result: QueryResult) -> set[str]:
    return (
        {r["subject"] for r in result.relations}
        | {r["object"] for r in result.relations}
        | {e["name"] for e in result.entities}
    )


# -- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        "mid-1990s",
        "2015-13-01",
        "2015-02-30",
        "2015-00",
        "0000",
        "2015-6",
        "2015/06",
        "",
        " 2015",
        "2015\n",
        "2015-06-01T00:00",
        2015,
    ],
)
def test_invalid_as_of_raises(bad: Any) -> None:
    with pytest.raises(QueryError, match="as_of"):
        QueryParam(space=SPACE, as_of=bad)


@pytest.mark.parametrize("good", ["2016", "2016-02", "2016-02-29", "1625-06-01"])
def test_valid_as_of_is_kept_as_given(good: str) -> None:
    assert QueryParam(space=SPACE, as_of=good).as_of == good


def test_as_of_pads_like_the_validity_keys() -> None:
    assert temporal.as_of_bounds("2016") == ("2016-01-01", "2016-12-31")
    assert temporal.as_of_bounds("2016-02") == ("2016-02-01", "2016-02-31")
    assert temporal.as_of_bounds("2016-02-29") == ("2016-02-29", "2016-02-29")


def test_as_believed_at_is_an_iso_instant_normalised_to_utc() -> None:
    assert QueryParam(space=SPACE, as_believed_at="2015-03-01T12:00:00").as_believed_at == _utc(
        "2015-03-01T12:00:00"
    )
    assert QueryParam(space=SPACE, as_believed_at="2015-03-01T12:00:00Z").as_believed_at == _utc(
        "2015-03-01T12:00:00"
    )
    assert QueryParam(space=SPACE, as_believed_at="2015-03-01T14:00:00+02:00").as_believed_at == _utc(
        "2015-03-01T12:00:00"
    )
    naive = datetime(2015, 3, 1, 12)
    assert QueryParam(space=SPACE, as_believed_at=naive).as_believed_at == _utc("2015-03-01T12:00:00")
    aware = datetime(2015, 3, 1, 13, tzinfo=timezone(timedelta(hours=1)))
    assert QueryParam(space=SPACE, as_believed_at=aware).as_believed_at == _utc("2015-03-01T12:00:00")
    for bad in ("March 2015", "yesterday", "2015-13-01T00:00:00", 1425211200):
        with pytest.raises(QueryError, match="as_believed_at"):
            QueryParam(space=SPACE, as_believed_at=bad)  # type: ignore[arg-type]


def test_traverse_refuses_two_superseded_switches(conn: psycopg.Connection, realm: str) -> None:
    with pytest.raises(QueryError):
        retrieval.traverse(
            conn,
            realm,
            SPACE,
            [1],
            max_hops=1,
            max_relation_edges=1,
            include_superseded=True,
            temporal=temporal.Temporal(),
        )


# -- valid time ------------------------------------------------------------------------------------


def test_undated_relations_are_valid_at_every_as_of(pg_dsn: str, realm: str, graph: dict[str, int]) -> None:
    for as_of in ("0001", "1625", "1625-06", "1625-06-01", "2016", "9999-12-31"):
        result = _ask(pg_dsn, realm, as_of=as_of)
        assert ("Ada Lovelace", "knows", "Undated Friend") in _triples(result), as_of
        assert ("Ada Lovelace", "ally_of", "Bob") not in _triples(result)  # still superseded by default
    assert ("Ada Lovelace", "knows", "Undated Friend") in _triples(_ask(pg_dsn, realm))


def test_partial_dates_are_padded_for_comparison(pg_dsn: str, realm: str, graph: dict[str, int]) -> None:
    june = _predicates(_ask(pg_dsn, realm, as_of="1625-06-01"))
    assert "lived_in" in june  # valid_from 1625 = 1625-01-01 <= 1625-06-01
    assert "served" not in june  # valid_to 1625-05 = 1625-05-31 < 1625-06-01
    may = _predicates(_ask(pg_dsn, realm, as_of="1625-05-15"))
    assert {"lived_in", "served"} <= may
    year = _predicates(_ask(pg_dsn, realm, as_of="1625"))  # the year overlaps both intervals
    assert {"lived_in", "served"} <= year
    month = _predicates(_ask(pg_dsn, realm, as_of="1625-05"))
    assert {"lived_in", "served"} <= month
    before = _predicates(_ask(pg_dsn, realm, as_of="1624-12-31"))
    assert "lived_in" not in before and "served" in before
    assert "member_of" not in before and "visited" not in before


def test_out_of_period_edge_does_not_surface_its_far_end(
    pg_dsn: str, realm: str, graph: dict[str, int]
) -> None:
    out = _ask(pg_dsn, realm, as_of="1625")
    assert "member_of" not in _predicates(out)
    assert ("Period Club", "located_in", "Far Town") not in _triples(out)  # undated, but never reached
    assert not {"Period Club", "Far Town"} & _names(out)
    assert "Far Town" not in out.context and "Period Club" not in out.context
    inside = _ask(pg_dsn, realm, as_of="1635")
    assert ("Ada Lovelace", "member_of", "Period Club") in _triples(inside)
    assert ("Period Club", "located_in", "Far Town") in _triples(inside)
    assert {r["hop"] for r in inside.relations if r["predicate"] == "located_in"} == {2}
    assert "(Ada Lovelace) --[member_of]--> (Period Club) [valid 1630 to 1640]" in inside.context


# -- belief time -----------------------------------------------------------------------------------


def test_belief_before_a_supersession_restores_the_superseded_edge(
    pg_dsn: str, realm: str, graph: dict[str, int]
) -> None:
    now = _triples(_ask(pg_dsn, realm))
    assert ("Ada Lovelace", "enemy_of", "Bob") in now and ("Ada Lovelace", "ally_of", "Bob") not in now

    then = _ask(pg_dsn, realm, as_believed_at="2015-01-01")
    assert ("Ada Lovelace", "ally_of", "Bob") in _triples(then)  # superseded since, but current at T
    assert ("Ada Lovelace", "enemy_of", "Bob") not in _triples(then)  # t_created after T
    ally = next(r for r in then.relations if r["predicate"] == "ally_of")
    # as the graph stood at T (issue 14): not superseded then, so no superseder and no t_expired yet
    assert ally["superseded_by"] is None and ally["t_expired"] is None and ally["superseded"] is False
    assert "(Ada Lovelace) --[ally_of]--> (Bob)" in then.context
    assert "[superseded]" not in then.context  # at T it was current

    boundary = _triples(
        _ask(pg_dsn, realm, as_believed_at="2020-01-01T00:00:00Z")
    )  # t_created <= T < t_expired
    assert ("Ada Lovelace", "enemy_of", "Bob") in boundary and (
        "Ada Lovelace",
        "ally_of",
        "Bob",
    ) not in boundary
    just_before = _triples(_ask(pg_dsn, realm, as_believed_at="2019-12-31T23:59:59Z"))
    assert ("Ada Lovelace", "ally_of", "Bob") in just_before and (
        "Ada Lovelace",
        "enemy_of",
        "Bob",
    ) not in just_before


def test_belief_time_history_marks_only_what_was_superseded_by_then(
    pg_dsn: str, realm: str, graph: dict[str, int]
) -> None:
    later = _ask(pg_dsn, realm, as_believed_at="2021-01-01", include_superseded=True)
    assert {("Ada Lovelace", "ally_of", "Bob"), ("Ada Lovelace", "enemy_of", "Bob")} <= _triples(later)
    assert "(Ada Lovelace) --[ally_of]--> (Bob) [superseded]" in later.context
    assert "(Ada Lovelace) --[enemy_of]--> (Bob)\n" in later.context + "\n"
    earlier = _ask(pg_dsn, realm, as_believed_at="2015-01-01", include_superseded=True)
    assert ("Ada Lovelace", "enemy_of", "Bob") not in _triples(earlier)  # history never includes the future
    assert "[superseded]" not in earlier.context
    current = _ask(pg_dsn, realm, include_superseded=True)
    assert "(Ada Lovelace) --[ally_of]--> (Bob) [superseded]" in current.context


def test_edge_not_yet_believed_does_not_surface_its_far_end(
    pg_dsn: str, realm: str, graph: dict[str, int]
) -> None:
    then = _ask(pg_dsn, realm, as_believed_at="2021-06-01")
    assert "founded" not in _predicates(then)
    assert ("NewCo", "based_in", "Newtown") not in _triples(
        then
    )  # always known, but only reachable via founded
    assert not {"NewCo", "Newtown"} & _names(then)
    now = _ask(pg_dsn, realm)
    assert ("NewCo", "based_in", "Newtown") in _triples(now)


def test_superseded_edge_does_not_surface_its_far_end(pg_dsn: str, realm: str, graph: dict[str, int]) -> None:
    # partner_of is superseded; its superseder rival_of is out of period in 2015: Carol is unreachable
    composed = _ask(pg_dsn, realm, as_of="2015")
    assert not {"partner_of", "rival_of", "owns"} & _predicates(composed)
    assert not {"Carol", "Hidden Estate"} & _names(composed)
    assert "Hidden Estate" not in composed.context
    # before the supersession was believed, partner_of was current and the walk goes through it
    believed = _ask(pg_dsn, realm, as_of="2015", as_believed_at="2018-01-01")
    assert {("Ada Lovelace", "partner_of", "Carol"), ("Carol", "owns", "Hidden Estate")} <= _triples(believed)
    # asking for the history walks the superseded edge and marks it
    history = _ask(pg_dsn, realm, as_of="2015", include_superseded=True)
    assert ("Carol", "owns", "Hidden Estate") in _triples(history)
    assert "(Ada Lovelace) --[partner_of]--> (Carol) [superseded]" in history.context
    # now, rival_of is current and in period from 2019: Carol is reached through it, not through partner_of
    now = _ask(pg_dsn, realm, as_of="2020")
    assert ("Ada Lovelace", "rival_of", "Carol") in _triples(now) and "partner_of" not in _predicates(now)
    assert ("Carol", "owns", "Hidden Estate") in _triples(now)


def test_as_of_composes_with_as_believed_at(pg_dsn: str, realm: str, graph: dict[str, int]) -> None:
    both = _predicates(_ask(pg_dsn, realm, as_of="2016", as_believed_at="2018-01-01"))
    assert "visited" in both  # valid from 2016, believed from 2017
    assert "ally_of" in both and "enemy_of" not in both  # belief at 2018
    assert "founded" not in both  # not believed until 2022
    assert "knows" in both  # undated, always known
    assert "member_of" not in both and "served" not in both  # out of period
    assert "visited" not in _predicates(
        _ask(pg_dsn, realm, as_of="2016", as_believed_at="2016-06-01")
    )  # not yet
    assert "visited" not in _predicates(
        _ask(pg_dsn, realm, as_of="2015", as_believed_at="2018-01-01")
    )  # period
    period = _predicates(_ask(pg_dsn, realm, as_of="1625-06-01", as_believed_at="2015-01-01"))
    assert {"lived_in", "ally_of", "knows"} <= period
    assert not {"served", "enemy_of", "visited", "founded", "member_of"} & period


# -- documents -------------------------------------------------------------------------------------


def test_documents_indexed_after_the_belief_instant_are_not_retrieved(
    pg_dsn: str, realm: str, graph: dict[str, int]
) -> None:
    now = _ask(pg_dsn, realm)
    assert {(c["doc_key"], c["via"]) for c in now.chunks} == {
        ("old-notes", "vector"),
        ("new-notes", "vector"),
        ("old-letter", "mention"),
        ("new-letter", "mention"),
    }
    then = _ask(pg_dsn, realm, as_believed_at="2015-01-01")
    assert {(c["doc_key"], c["via"]) for c in then.chunks} == {
        ("old-notes", "vector"),
        ("old-letter", "mention"),
    }
    assert "later edition" not in then.context and "much later" not in then.context
    assert [c["ref"] for c in then.chunks] == [1, 2]
    naive = _ask(pg_dsn, realm, mode="naive", as_believed_at="2015-01-01")
    assert [c["doc_key"] for c in naive.chunks] == ["old-notes"]
    assert _ask(pg_dsn, realm, mode="naive", as_believed_at="2009-12-31").chunks == []
    # as_of is valid time: it does not filter passages
    assert len(_ask(pg_dsn, realm, as_of="1625").chunks) == 4
    # the walk reads the same state: the chunks and mentions the system had at the instant
    walked = _ask(pg_dsn, realm, graph_ranking="ppr", as_believed_at="2015-01-01")
    assert walked.channels["ppr_seeds"] == 1
    assert {(c["doc_key"], c["via"]) for c in walked.chunks} == {("old-notes", "ppr"), ("old-letter", "ppr")}
    assert len(_ask(pg_dsn, realm, graph_ranking="ppr").chunks) == 4


def test_the_fulltext_chunk_channel_reads_only_documents_known_at_the_belief_instant(
    pg_dsn: str, realm: str, graph: dict[str, int]
) -> None:
    lexical: dict[str, Any] = {"mode": "naive", "chunk_channels": ["fulltext"]}
    now = _ask(pg_dsn, realm, **lexical)
    assert {(c["doc_key"], c["via"]) for c in now.chunks} == {
        ("old-notes", "fulltext"),
        ("new-notes", "fulltext"),
    }
    then = _ask(pg_dsn, realm, as_believed_at="2015-01-01", **lexical)
    assert [(c["doc_key"], c["via"]) for c in then.chunks] == [("old-notes", "fulltext")]
    assert _ask(pg_dsn, realm, as_believed_at="2009-12-31", **lexical).chunks == []
    fused = _ask(pg_dsn, realm, as_believed_at="2015-01-01", chunk_channels=["vector", "fulltext"])
    assert {(c["doc_key"], c["via"]) for c in fused.chunks} == {
        ("old-notes", "vector+fulltext"),
        ("old-letter", "mention"),
    }


# -- reporting -------------------------------------------------------------------------------------


def test_filters_are_in_the_assembly_report_and_log(
    pg_dsn: str, realm: str, graph: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="pgrag_dag.query"):
        result = _ask(pg_dsn, realm, as_of="1625-06-01", as_believed_at="2015-01-01T00:00:00")
    assert result.assembly["filters"] == {
        "as_of": "1625-06-01",
        "as_believed_at": "2015-01-01T00:00:00+00:00",
        "include_superseded": False,
        "relation_types": None,
    }
    line = next(r.getMessage() for r in caplog.records if "query assembly" in r.getMessage())
    assert "as_of=1625-06-01" in line and "as_believed_at=2015-01-01T00:00:00+00:00" in line
    plain = _ask(pg_dsn, realm)
    assert plain.assembly["filters"] == {
        "as_of": None,
        "as_believed_at": None,
        "include_superseded": False,
        "relation_types": None,
    }
    assert plain.assembly["total"]["chars_placed"] == plain.assembly["total"]["chars_retrieved"] > 0


def test_validity_rendering() -> None:
    base = {"subject": "A", "predicate": "p", "object": "B", "negated": False}
    assert render_relation({**base, "valid_from": "1625", "valid_to": None}) == "(A) --[p]--> (B) [from 1625]"
    assert render_relation({**base, "valid_from": "1630", "valid_to": "1640-06"}) == (
        "(A) --[p]--> (B) [valid 1630 to 1640-06]"
    )
    assert render_relation({**base, "superseded_by": 7}) == "(A) --[p]--> (B) [superseded]"
    assert render_relation({**base, "superseded_by": 7, "superseded": False}) == "(A) --[p]--> (B)"
    assert (
        render_relation(
            {**base, "valid_from": "1625", "superseded_by": 7, "superseded": True, "description": "d"}
        )
        == "(A) --[p]--> (B) [from 1625] [superseded]: d"
    )
