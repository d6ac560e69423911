"""``make demo`` / ``pgrag demo``: every asset of every configured partition through Dagster, a
summary, and one query over what was built. Offline: the model is ``replay`` over the corpus cassette.

A partition of :data:`BELIEF_QUESTIONS` (``tenk.disney``) is indexed so that its last document lands at
a later belief instant (§5.3, issue 14): while that document is not indexed yet, a first run
materialises :data:`FIRST_RUN_ASSETS` from the sources without it, then the full run adds it (only its
chunks are extracted). Its question is asked as believed just before that document was added — the
instant read from the belief history (:func:`pgrag_dag.store.history.before_added`), on a
first demo and a repeated one alike — and at present.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from pgrag_dag.assets.changes import COMMUNITY_LAG_CHECK
from pgrag_dag.assets.runner import materialize_partition
from pgrag_dag.config.load import load_settings
from pgrag_dag.config.sections import Settings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ConfigurationError, ReplayMissError
from pgrag_dag.names import split_partition_key
from pgrag_dag.operate.summary import summarise, summarise_first
from pgrag_dag.store import db, documents, history

DEMO_QUESTION = "How did Ada Lovelace contribute to Charles Babbage's Analytical Engine?"
# partition -> (question, QueryParam overrides) asked by the demo with synthesis (recorded in the cassettes)
CFO_QUESTION = "Who was the chief financial officer of The Walt Disney Company?"
DEMO_QUESTIONS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "wiki.demo": [(DEMO_QUESTION, {})],
    # an as-of query whose answer changes with the date (§5.4): a later filing's CFO supersedes the earlier
    # (cfo_of is single-valued in the finance preset), so a past date asks for the superseded history too
    "tenk.disney": [
        (CFO_QUESTION, {"as_of": "2005", "include_superseded": True}),
        (CFO_QUESTION, {"as_of": "2012", "include_superseded": True}),
        (CFO_QUESTION, {"as_of": "2016"}),
    ],
}
# partition -> (question, QueryParam overrides) whose answer changed with the space's last document, asked
# as believed just before that document was added and at present (recorded in the cassette)
REVENUE_QUESTION = "How did The Walt Disney Company's revenues change in its most recent fiscal year?"
BELIEF_QUESTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    # FY2018's increases supersede FY2017's decreases: superseded edges kept, so both states show
    "tenk.disney": (REVENUE_QUESTION, {"include_superseded": True}),
}
FIRST_RUN_ASSETS = (
    "chunks",
    "raw_extractions",
    "gated_triples",
    "resolved_entities",
    "relations",
    "embeddings",
)
"""What the run without the last document materialises: the graph, not its communities (built once, on the
whole graph: reports for the graph without its last document were never recorded)."""


def belief_queries(partition: str, instant: datetime) -> list[tuple[str, dict[str, Any]]]:
    """The belief question of ``partition`` (:data:`BELIEF_QUESTIONS`) as ``(question, overrides)``: at
    ``instant`` (``as_believed_at``), then at present. Raises :class:`KeyError` for another partition."""
    question, overrides = BELIEF_QUESTIONS[partition]
    return [(question, {**overrides, "as_believed_at": instant}), (question, dict(overrides))]


def run_demo() -> list[str]:
    """Run the demo end to end and print its summaries and queries' results (see the module docstring); stage
    progress and warnings (each once) go to stderr. A partition whose run fails is reported in one line — the
    failed assets, the partition, the cause, and the log file holding the stack trace — and the next one goes
    on. Returns the partitions that failed (empty when all went through)."""
    from rich.console import Console

    from pgrag_dag.cli import progress as cli_progress
    from pgrag_dag.providers.embedding import model_warning

    settings = load_settings()
    engine = Engine.from_settings(settings)
    console = Console(stderr=True)
    failed: list[str] = []
    try:
        with cli_progress.watching(console) as (display, once):
            print(f"database: {db.redact(engine.dsn)}")
            print(f"cassettes: {engine.import_cassettes()} recorded responses loaded")
            if warning := model_warning(settings.embedding.model):
                once.say(warning)
            _switch_embedders(engine, settings)
            for partition in settings.partitions():
                try:
                    _demo_partition(engine, settings, partition, once)
                except Exception as exc:  # this partition is reported; the others go on
                    where = cli_progress.run_failure_where(exc, display, partition)
                    cli_progress.report_failure(console, settings.resolve(settings.data_dir), exc, where)
                    failed.append(partition)
            if failed:
                print(
                    f"\n{len(failed)} of {len(settings.partitions())} partitions failed: {', '.join(failed)}"
                )
    finally:
        engine.close()
    return failed


def _demo_partition(engine: Engine, settings: Settings, partition: str, once: Any) -> None:
    """One partition of the demo: its run(s) through Dagster, summary, change feed and questions. Checks that
    failed are said once each through ``once`` (:class:`~pgrag_dag.cli.progress.OnceHandler`)."""
    from pgrag_dag.operate.changes import changes_since

    realm, space = split_partition_key(partition)
    withheld = _index_without_last(engine, settings, partition) if partition in BELIEF_QUESTIONS else None
    # the change feed's watermark before the full run: afterwards, what that run changed (§6.1 "Change")
    since = changes_since(engine, realm, space, None).watermark if withheld is not None else None
    metas = materialize_partition(settings, partition, console_level="CRITICAL")
    logging.getLogger("pgrag_dag").setLevel(logging.WARNING)  # the run's managed loggers were at INFO
    for check, ok in sorted(metas.get("_checks", {}).items()):
        if not ok:
            once.say(
                f"check {check} of {partition} failed"
                + (
                    ": the communities lag behind the graph (stale)"
                    if check.endswith(COMMUNITY_LAG_CHECK)
                    else " (its metadata is in the Dagster UI: make ui)"
                )
            )
    print("\n" + "\n".join(summarise(partition, metas)))
    if withheld is not None:
        print("\nchanges_since(the watermark taken before this run):")
        print("\n".join("  " + line for line in changes_since(engine, realm, space, since).summary()))
    for question, overrides in DEMO_QUESTIONS.get(partition, []):
        _ask(engine, settings, realm, space, question, overrides)
    if withheld is not None:
        with engine.connect() as conn:
            instant = history.before_added(conn, realm, space, withheld)
        if instant is None:  # cannot be: the full run has just added it
            raise ConfigurationError(f"{partition}: the belief history has no 'added' event for {withheld}")
        print(
            f"\nbelief time: {withheld} was added at {instant.isoformat()} + 1 µs (belief_log); asked "
            "just before it and now"
        )
        for question, overrides in belief_queries(partition, instant):
            _ask(engine, settings, realm, space, question, overrides)


def _index_without_last(engine: Engine, settings: Settings, partition: str) -> str:
    """The ``doc_key`` of ``partition``'s last document; when the space does not hold it yet, first
    materialise :data:`FIRST_RUN_ASSETS` from the sources without it
    (:func:`~pgrag_dag.ingest.sources.without_last_file`, passed to the run's steps through the environment)
    and print that run's summary. Raises :class:`ConfigurationError` when the space's sources cannot lose
    their last file or its name cannot be an environment key, and as :func:`materialize_partition`."""
    from pgrag_dag.ingest.sources import without_last_file
    from pgrag_dag.pipeline.doc_keys import migrate_keys

    realm, space = split_partition_key(partition)
    first, withheld = without_last_file(settings, settings.space_spec(realm, space))
    migrate_keys(engine, realm, space)  # a data dir indexed before issue 16 holds it under its old key
    with engine.connect() as conn:
        if documents.document_indexed(conn, realm, space, withheld):
            print(f"\npartition {partition}: its last document, {withheld}, was indexed by an earlier run")
            return withheld
    if not re.fullmatch(r"[a-z0-9_]+", space):
        raise ConfigurationError(
            f"space {space!r}: a belief-time demo space needs a name of lowercase letters, digits and _"
        )
    sources = json.dumps([src.model_dump(mode="json") for src in first.sources])
    with _environ(f"PGRAG_REALMS__{realm}__SPACES__{space}__SOURCES", sources):
        metas = materialize_partition(settings, partition, assets=FIRST_RUN_ASSETS, console_level="CRITICAL")
    logging.getLogger("pgrag_dag").setLevel(logging.WARNING)
    print("\n" + "\n".join(summarise_first(partition, withheld, metas)))
    return withheld


@contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """``os.environ[name] = value`` inside the block (the in-process run's steps load their settings from
    the file and the environment), restored after."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _ask(
    engine: Engine, settings: Settings, realm: str, space: str, question: str, overrides: dict[str, Any]
) -> None:
    """Print one question's retrieval (counts, top entities, the relations :func:`_shown` picks, with
    their state) and its synthesised answer, or why the cassette cannot show it."""
    from pgrag_dag.query.assembly import render_relation
    from pgrag_dag.query.run import query, query_data
    from pgrag_dag.query_param import QueryParam

    param = QueryParam.from_settings(settings.retrieval, space=space, **overrides)
    res = query_data(
        question, param, dsn=engine.dsn, realm=realm, embedder=engine.embedder(), telemetry=settings.telemetry
    )
    where = ", ".join(
        f"{k}={v.isoformat() if isinstance(v, datetime) else v!r}" for k, v in overrides.items()
    )
    print(f"\nquery_data({question!r}, mode=mix{', ' + where if where else ''}):")
    print(
        f"  {len(res.entities)} entities, {len(res.relations)} relations, {len(res.chunks)} chunks;"
        f" top entities: " + ", ".join(e["name"] for e in res.entities[:4])
    )
    if param.as_believed_at is not None or question == REVENUE_QUESTION:
        docs = sorted({str(c.get("doc_key")) for c in res.chunks})
        print(f"  passages from {len(docs)} documents, the last {docs[-1] if docs else '-'}")
    by_id = {r["id"]: r for r in res.relations}
    for rel in _shown(res.relations, question):
        print(f"  hop {rel['hop']}: {render_relation(rel)}")
        superseded = rel["superseded"] if "superseded" in rel else rel.get("superseded_by") is not None
        if superseded and rel.get("superseded_by") is not None:
            by = by_id.get(rel["superseded_by"])
            print(
                "      superseded by: "
                + (render_relation({**by, "description": None}) if by else f"relation {rel['superseded_by']}")
            )
    total = res.assembly.get("total", {})
    print(
        f"  context: {total.get('chars_placed')} of {total.get('chars_retrieved')} "
        "retrieved characters placed"
    )
    if not res.relations and not res.chunks:
        print(
            "  answer: not shown — nothing was believed then (this data directory indexed every document in "
            "one run; `make clean` and `make demo` rebuild it)"
        )
        return
    try:
        answer, _ = query(
            question, param, dsn=engine.dsn, realm=realm, embedder=engine.embedder(), client=engine.client()
        )
    except ReplayMissError:  # the context differs from the recorded one (e.g. another embedder)
        print(
            "  answer: not shown — the cassette has no recorded answer for this exact context (it was "
            "recorded with the local embedder on the shipped corpus); a live model in llm.models answers it"
        )
        return
    print("  answer (synthesised, replayed): " + answer.replace("\n", "\n  "))


def _switch_embedders(engine: Engine, settings: Settings) -> None:
    """Re-embed each configured realm that an earlier demo in this data directory embedded with another
    model (e.g. the hashing embedder, the default before issue 12), saying so in one line."""
    from pgrag_dag.cli.progress import reembed_progress
    from pgrag_dag.operate.reembed import reembed_if_switched, summary

    for realm in settings.realms:
        with reembed_progress(realm) as progress:
            result = reembed_if_switched(engine, realm, echo=print, progress=progress)
        if result is not None:
            print(summary(result))


def _shown(relations: list[dict[str, Any]], question: str) -> list[dict[str, Any]]:
    """Up to five relations to print: for the CFO question, the cfo_of edges (what changes with the date);
    for the revenue question, the edges into Revenues (what the last filing superseded)."""
    if question == CFO_QUESTION:
        return [r for r in relations if r["predicate"] == "cfo_of"][:5]
    if question == REVENUE_QUESTION:
        return [r for r in relations if r["object"] == "Revenues"][:5]
    return relations[:5]
