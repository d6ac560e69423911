"""The change feed (paper §6.1 "Change"; issue 14 item 2): every event of real indexing, supersession and
deletion once, watermarks from the database, and exactly-once delivery to a poller while writers commit
concurrently and out of order."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from psycopg import sql

from pgrag_dag import QueryError, changes_since
from pgrag_dag.engine import Engine
from pgrag_dag.errors import InvalidNameError
from pgrag_dag.pipeline import delete_document, index_documents
from pgrag_dag.store import db, history
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.testing.stub_server import StubServer
from tests.fix_corpus import extraction_answer
from tests.graph.test_supersession import _write, answer, novel  # noqa: F401  (the fixture of the narrative corpus)

Novel = tuple[Path, Engine, StubServer]


def _rendered(events: tuple[dict, ...]) -> list[tuple[str, str, str]]:
    return [(e["subject"], e["predicate"], e["object"]) for e in events]


def test_the_feed_lists_each_kind_of_event_of_real_indexing_supersession_and_deletion(
    novel: Novel, realm: str
) -> None:
    root, engine, _ = novel
    _write(root, "01_book.txt", "Athos is an ally of d'Artagnan.", "Rochefort serves Richelieu.")
    index_documents(engine, realm, "books", communities=False)
    first = changes_since(engine, realm, "books", None)
    assert sorted(_rendered(first.relations_added)) == [
        ("Athos", "ally_of", "d'Artagnan"),
        ("Rochefort", "serves", "Richelieu"),
    ]
    assert all(e["rendered"] for e in first.relations_added)
    assert sorted(e["name"] for e in first.entities_created) == [
        "Athos",
        "Richelieu",
        "Rochefort",
        "d'Artagnan",
    ]
    assert [e["doc_key"] for e in first.documents_added] == ["01_book.txt"]
    assert first.events == 7 and first.since is None and first.watermark != ""
    # a later book reverses the alliance: asserted + superseded, the superseder named
    _write(root, "02_book.txt", "Athos is now an enemy of d'Artagnan.", "Porthos lives in Paris.")
    index_documents(engine, realm, "books", communities=False)
    second = changes_since(engine, realm, "books", first.watermark)
    assert sorted(_rendered(second.relations_added)) == [
        ("Athos", "enemy_of", "d'Artagnan"),
        ("Porthos", "lives_in", "Paris"),
    ]
    [sup] = second.relations_superseded
    enemy = next(e for e in second.relations_added if e["predicate"] == "enemy_of")
    assert (sup["predicate"], sup["superseded_by"], sup["superseded_by_rendered"]) == (
        "ally_of",
        enemy["id"],
        enemy["rendered"],
    )
    assert [e["doc_key"] for e in second.documents_added] == ["02_book.txt"]
    assert sorted(e["name"] for e in second.entities_created) == ["Paris", "Porthos"]
    assert second.seqs() and min(second.seqs()) > max(first.seqs())
    # deleting the book: its facts go dormant, the alliance is restored, the document removed
    delete_document(engine, realm, "books", "02_book.txt")
    third = changes_since(engine, realm, "books", second.watermark)
    assert sorted(_rendered(third.relations_dormant)) == [
        ("Athos", "enemy_of", "d'Artagnan"),
        ("Porthos", "lives_in", "Paris"),
    ]
    assert _rendered(third.relations_restored) == [("Athos", "ally_of", "d'Artagnan")]
    assert sorted(e["name"] for e in third.entities_dormant) == ["Paris", "Porthos"]
    assert [e["doc_key"] for e in third.documents_removed] == ["02_book.txt"]
    assert not third.relations_added and not third.documents_added
    # the book comes back, the first one is rewritten: revived relation and entities, a replaced document
    _write(
        root,
        "01_book.txt",
        "Athos is an ally of d'Artagnan.",
        "Rochefort serves Richelieu.",
        "Athos taught d'Artagnan to fence.",
    )
    index_documents(engine, realm, "books", communities=False)
    fourth = changes_since(engine, realm, "books", third.watermark)
    assert [e["doc_key"] for e in fourth.documents_replaced] == ["01_book.txt"]
    assert [e["doc_key"] for e in fourth.documents_added] == ["02_book.txt"]
    assert sorted(_rendered(fourth.relations_revived)) == [
        ("Athos", "enemy_of", "d'Artagnan"),
        ("Porthos", "lives_in", "Paris"),
    ]
    assert sorted(e["name"] for e in fourth.entities_revived) == ["Paris", "Porthos"]
    assert _rendered(fourth.relations_added) == [("Athos", "taught", "d'Artagnan")]
    assert _rendered(fourth.relations_superseded) == [("Athos", "ally_of", "d'Artagnan")]
    # archiving an entity (a write through the triggers) and taking it back
    with db.connect(engine.dsn) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {} SET archived_at = now(), dormant_since = now() WHERE name = 'Rochefort'"
            ).format(qualified(realm, "entities"))
        )
        conn.commit()
        mid = changes_since(engine, realm, "books", fourth.watermark)
        conn.execute(
            sql.SQL("UPDATE {} SET archived_at = NULL, dormant_since = NULL WHERE name = 'Rochefort'").format(
                qualified(realm, "entities")
            )
        )
        conn.commit()
    last = changes_since(engine, realm, "books", mid.watermark)
    assert [e["name"] for e in mid.entities_archived] == ["Rochefort"] and mid.events == 1
    assert [e["name"] for e in last.entities_unarchived] == ["Rochefort"] and last.events == 1
    # the whole history read from the beginning is every window's events, each once
    everything = changes_since(engine, realm, "books", None)
    windows = [first, second, third, fourth, mid, last]
    assert everything.seqs() == sorted(s for w in windows for s in w.seqs())


def test_nothing_is_collapsed_inside_one_window(novel: Novel, realm: str) -> None:
    root, engine, _ = novel
    _write(root, "01_book.txt", "Athos is an ally of d'Artagnan.")
    _write(root, "02_book.txt", "Athos is now an enemy of d'Artagnan.")
    index_documents(engine, realm, "books", communities=False)
    cs = changes_since(engine, realm, "books", "")
    ally = next(e for e in cs.relations_added if e["predicate"] == "ally_of")
    assert [e["id"] for e in cs.relations_superseded] == [ally["id"]]  # asserted and superseded: both listed
    assert cs.seqs() == sorted(cs.seqs()) and len(set(cs.seqs())) == cs.events


def test_reindexing_unchanged_documents_yields_an_empty_delta(novel: Novel, realm: str) -> None:
    root, engine, _ = novel
    _write(root, "01_book.txt", "Athos is an ally of d'Artagnan.", "Porthos lives in Paris.")
    index_documents(engine, realm, "books", communities=False)
    before = changes_since(engine, realm, "books", None)
    index_documents(engine, realm, "books", communities=False)
    after = changes_since(engine, realm, "books", before.watermark)
    assert before.events > 0 and after.events == 0 and after.counts() == dict.fromkeys(after.counts(), 0)
    assert (
        after.watermark != before.watermark
    )  # the indexing run committed transactions: the snapshot moved on


def _with_reports(messages: list[dict[str, str]]) -> str:
    """The narrative corpus's extractions, and the small corpus's community reports."""
    report = messages[0]["content"].startswith("You write a report")
    return extraction_answer(messages) if report else answer(messages)


def test_community_lag_is_counted_in_relation_events_after_the_latest_build(novel: Novel, realm: str) -> None:
    root, engine, server = novel
    server.answer = _with_reports
    _write(
        root, "01_book.txt", "Rochefort serves Richelieu.", "Aramis serves Richelieu."
    )  # one community of three
    index_documents(engine, realm, "books", communities=False)
    never = changes_since(engine, realm, "books", None)
    assert never.communities_stale and never.communities_built_at is None
    assert never.changed_relations_since_communities == len(never.relations_added) == 2
    index_documents(engine, realm, "books")
    built = changes_since(engine, realm, "books", never.watermark)
    assert not built.communities_stale and built.changed_relations_since_communities == 0
    assert built.communities_built_at is not None and built.events == 0
    _write(root, "02_book.txt", "Aramis does not serve Richelieu.")
    index_documents(engine, realm, "books", communities=False)
    behind = changes_since(engine, realm, "books", built.watermark)
    assert (
        behind.communities_stale and behind.changed_relations_since_communities == 2
    )  # denial asserted, service superseded
    assert behind.changed_relations_since_communities == len(behind.relations_added) + len(
        behind.relations_superseded
    )
    index_documents(engine, realm, "books")
    assert not changes_since(engine, realm, "books", behind.watermark).communities_stale


def test_a_communities_run_that_finds_the_graph_unchanged_clears_the_lag(novel: Novel, realm: str) -> None:
    from pgrag_dag.pipeline.community_stages import stage_communities

    root, engine, server = novel
    server.answer = _with_reports
    _write(root, "01_book.txt", "Rochefort serves Richelieu.", "Aramis serves Richelieu.")
    _write(root, "02_book.txt", "Porthos lives in Paris.")  # a pair: no community of three
    index_documents(engine, realm, "books")
    assert not changes_since(engine, realm, "books", None).communities_stale
    # a relation goes dormant and comes back: two events, no net change of the graph
    with engine.connect() as conn:
        rel = qualified(realm, "relations")
        one = conn.execute(sql.SQL("SELECT min(id) FROM {}").format(rel)).fetchone()[0]  # type: ignore[index]
        for value in ("now()", "NULL"):
            with conn.transaction():
                conn.execute(
                    sql.SQL("UPDATE {} SET dormant_since = " + value + " WHERE id = %s").format(rel), (one,)
                )  # type: ignore[arg-type]
    behind = changes_since(engine, realm, "books", None)
    assert behind.communities_stale and behind.changed_relations_since_communities == 2
    result = stage_communities(engine, realm, "books")
    assert result.metadata["skipped"] == "graph unchanged since the last build"
    after = changes_since(engine, realm, "books", None)
    assert not after.communities_stale and after.changed_relations_since_communities == 0
    assert after.communities_built_at == behind.communities_built_at  # nothing was rebuilt


def test_a_space_with_no_history_is_refused_not_reported_quiet(novel: Novel, realm: str) -> None:
    root, engine, _ = novel
    _write(root, "01_book.txt", "Athos is an ally of d'Artagnan.")
    index_documents(engine, realm, "books", communities=False)
    for typo in ("Books", "book"):
        with pytest.raises(QueryError, match=f"space '{typo}' does not exist in realm"):
            changes_since(engine, realm, typo, None)
    assert changes_since(engine, realm, "books", None).events > 0


def test_a_malformed_or_foreign_watermark_is_refused_naming_it(realm: str, pg_dsn: str) -> None:
    for bad in ["yesterday", "12:10:", "1:2:3;drop", "2024-01-01T00:00:00Z"]:
        with pytest.raises(QueryError, match="malformed watermark") as err:
            changes_since(pg_dsn, realm, "main", bad)
        assert repr(bad) in str(err.value)
    with pytest.raises(
        QueryError, match="malformed watermark '20:10:'"
    ):  # xmin after xmax: PostgreSQL refuses it
        changes_since(pg_dsn, realm, "main", "20:10:")
    with pytest.raises(QueryError, match="ahead of this database"):
        changes_since(pg_dsn, realm, "main", "900000000000:900000000000:")
    with pytest.raises(QueryError, match="does not exist"):
        changes_since(pg_dsn, "nosuchrealm", "main", None)
    with pytest.raises(InvalidNameError):
        changes_since(pg_dsn, realm, "*", None)
    with pytest.raises(
        QueryError, match="space 'main' does not exist in realm"
    ):  # nothing ever indexed into it
        changes_since(pg_dsn, realm, "main", None)


# ---------------------------------------------------------------- exactly once under concurrent writers

WRITERS = 6
TRANSACTIONS_PER_WRITER = 25
POLL_DEADLINE_S = 120.0


def _writer(
    dsn: str,
    realm: str,
    space: str,
    n: int,
    seed: int,
    barrier: threading.Barrier,
    errors: list[BaseException],
) -> None:
    """``n`` transactions, each writing belief-log rows through the triggers (entities created, made dormant,
    a relation asserted) and document events; commits are delayed at random, so transactions begun earlier
    commit later than others and stay open across several polls."""
    rng = random.Random(seed)
    ent = qualified(realm, "entities")
    rel = qualified(realm, "relations")
    try:
        with db.connect(dsn) as conn:
            barrier.wait(timeout=30)
            for i in range(n):
                with conn.transaction():
                    a, b = (
                        conn.execute(
                            sql.SQL("INSERT INTO {} (space, name) VALUES (%s, %s) RETURNING id").format(ent),
                            (space, f"w{seed}-{i}-{side}"),
                        ).fetchone()[0]
                        for side in "ab"
                    )  # type: ignore[index]
                    conn.execute(
                        sql.SQL(
                            "INSERT INTO {} (space, source_id, target_id, predicate, rendered) "
                            "VALUES (%s, %s, %s, 'knows', %s)"
                        ).format(rel),
                        (space, a, b, f"w{seed}-{i} knows"),
                    )
                    if rng.random() < 0.3:
                        conn.execute(
                            sql.SQL("UPDATE {} SET dormant_since = now() WHERE id = %s").format(ent), (b,)
                        )
                    history.log_documents(conn, realm, space, [(f"doc-{seed}-{i}", "added")])
                    time.sleep(rng.choice([0, 0, 0.001, 0.01, 0.05, 0.2]))  # some stay open across polls
    except BaseException as exc:  # reported by the test
        errors.append(exc)


def test_a_poller_sees_every_event_exactly_once_while_writers_commit_out_of_order(
    realm: str, pg_dsn: str
) -> None:
    space = "busy"
    with db.connect(
        pg_dsn, autocommit=True
    ) as seed:  # the space exists before the first poll (an unknown one is refused)
        history.log_documents(seed, realm, space, [("doc-seed", "added")])
    barrier = threading.Barrier(WRITERS + 1)
    errors: list[BaseException] = []
    threads = [
        threading.Thread(
            target=_writer,
            args=(pg_dsn, realm, space, TRANSACTIONS_PER_WRITER, w, barrier, errors),
            daemon=True,
        )
        for w in range(WRITERS)
    ]
    for t in threads:
        t.start()
    # an open transaction begun before every writer, committed after many of them
    with db.connect(pg_dsn) as early:
        history.log_documents(early, realm, space, [("doc-early", "added")])
        barrier.wait(timeout=30)
        seen: list[int] = []
        poll_of: dict[int, int] = {}
        watermark: str | None = None
        polls = nonempty = 0
        deadline = time.monotonic() + POLL_DEADLINE_S
        early_open = True
        while time.monotonic() < deadline:
            cs = changes_since(pg_dsn, realm, space, watermark)
            seen += cs.seqs()
            poll_of.update(dict.fromkeys(cs.seqs(), polls))
            polls += 1
            nonempty += cs.events > 0
            watermark = cs.watermark
            if early_open and polls == 20:
                early.commit()
                early_open = False
            if not early_open and not any(t.is_alive() for t in threads) and cs.events == 0:
                break
            time.sleep(0.005)
        if early_open:
            early.commit()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    # the loop's last poll may have read its snapshot just before a writer's last commit, then seen the writer
    # gone: one more poll delivers what committed in between (and must not repeat anything)
    final = changes_since(pg_dsn, realm, space, watermark)
    seen += final.seqs()
    poll_of.update(dict.fromkeys(final.seqs(), polls))
    with db.connect(pg_dsn) as conn:
        written = [
            r[0]
            for r in conn.execute(
                sql.SQL("SELECT seq FROM {} WHERE space = %s ORDER BY seq").format(
                    qualified(realm, "belief_log")
                ),
                (space,),
            ).fetchall()
        ]
    # every writer transaction: 2 entities + 1 relation + 1 document (+ sometimes a dormant entity)
    assert (
        len(written) >= WRITERS * TRANSACTIONS_PER_WRITER * 4 + 2
    )  # + the seed and the early transaction's event
    assert len(seen) == len(set(seen)), "an event was delivered twice"
    assert sorted(seen) == written, f"lost: {sorted(set(written) - set(seen))[:10]}"
    assert polls >= 20 and nonempty >= 5  # the writers really interleaved with many polls
    early_seq = written[
        1
    ]  # written first after the seed, committed after 20 polls: later-begun ones were seen before it
    assert sum(poll_of[s] < poll_of[early_seq] for s in written[2:]) >= 20
    print(
        f"\nchange feed concurrency: {WRITERS} writers x {TRANSACTIONS_PER_WRITER} transactions, "
        f"{polls} polls ({nonempty} non-empty), {len(written)} events, each seen once"
    )


def test_archival_and_a_write_during_the_communities_read_make_the_communities_stale(
    novel: Novel, realm: str
) -> None:
    """Archiving an entity writes no relation event, yet it changes what the reports are built from: the
    lag counts it as a graph write (issue 28); so does a relation written by a transaction that began before
    the communities stage read the graph and committed after it — which the clock alone missed."""
    from pgrag_dag.pipeline.community_stages import stage_communities
    from pgrag_dag.store import retention

    root, engine, server = novel
    server.answer = _with_reports
    _write(root, "01_book.txt", "Rochefort serves Richelieu.", "Aramis serves Richelieu.")
    index_documents(engine, realm, "books")
    built = changes_since(engine, realm, "books", None)
    assert not built.communities_stale and built.graph_writes_since_communities == 0
    ent = qualified(realm, "entities")
    with engine.connect() as conn, conn.transaction():
        aramis = conn.execute(sql.SQL("SELECT id FROM {} WHERE name = 'Aramis'").format(ent)).fetchone()[0]  # type: ignore[index]
        retention.archive(conn, realm, "books", [aramis])
    archived = changes_since(engine, realm, "books", built.watermark)
    assert archived.entities_archived and archived.changed_relations_since_communities == 0
    assert archived.communities_stale and archived.graph_writes_since_communities == 1
    stage_communities(engine, realm, "books")  # rebuilt without Aramis: current again
    rebuilt = changes_since(engine, realm, "books", archived.watermark)
    assert not rebuilt.communities_stale and rebuilt.graph_writes_since_communities == 0

    rel = qualified(realm, "relations")
    writer = db.connect(engine.dsn)  # begins before the communities read, commits after it
    try:
        ids = writer.execute(
            sql.SQL("SELECT source_id, target_id, chunk_ids FROM {} LIMIT 1").format(rel)
        ).fetchone()
        writer.execute(
            sql.SQL(
                """INSERT INTO {} (space, source_id, target_id, predicate, description, chunk_ids)
                   VALUES ('books', %s, %s, 'distrusts', 'a late claim', %s)"""
            ).format(rel),
            ids,
        )
        stage_communities(engine, realm, "books")
        writer.commit()
    finally:
        writer.close()
    late = changes_since(engine, realm, "books", rebuilt.watermark)
    assert late.relations_added and late.communities_stale
    assert late.graph_writes_since_communities == 1
    assert late.changed_relations_since_communities == 0  # stamped before the read: the clock misses it
