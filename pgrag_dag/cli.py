"""pgrag: index your documents into a bi-temporal graph in PostgreSQL and ask it questions.

Start with `pgrag init DIR` (a configuration for a folder of documents), then `pgrag index REALM.SPACE`,
`pgrag status`, `pgrag query "..."`, `pgrag view REALM.SPACE`.

Every command reads the settings from PGRAG_CONFIG (default ./pgrag.yaml) and PGRAG_ environment
variables. Errors of the engine are printed as one line and exit with status 2.
"""
# The commands live here and in cli_project (init, add), cli_inspect (status, list, lineage), cli_graph
# (export, view) and cli_delete (delete ...), registered by the imports at the bottom.

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from pgrag_dag.errors import PgragError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help=re.sub(r"(?<!\n)\n(?!\n)", " ", __doc__ or ""))  # paragraphs reflowed by the terminal
cassette_app = typer.Typer(no_args_is_help=True, help="Export or import recorded model responses (JSONL).")
app.add_typer(cassette_app, name="cassette")
cache_app = typer.Typer(no_args_is_help=True, help="Evict poison responses from the LLM response cache.")
app.add_typer(cache_app, name="cache")


WORKSPACE = """load_from:
  - python_module:
      module_name: pgrag_dag.assets.definitions
      attribute: defs
      location_name: pgrag
"""
"""The Dagster workspace of the code location: the repository's ``workspace.yaml``, written into the Dagster home
by ``pgrag ui`` where there is none."""


def _version(show: bool) -> None:
    if show:
        from importlib.metadata import version

        typer.echo(f"pgrag {version('pgrag-dag')}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True,
                                                          help="print the installed version and exit")] = None) -> None:
    pass  # the options of `pgrag` itself; the commands are below


def _engine():  # type: ignore[no-untyped-def]
    from pgrag_dag.config import load_settings
    from pgrag_dag.engine import Engine

    return Engine.from_settings(load_settings())


def _fail(exc: PgragError) -> None:
    typer.echo(f"error: {type(exc).__name__}: {exc}", err=True)
    raise typer.Exit(2)


@app.command()
def demo() -> None:
    """Materialise every asset of each configured partition through Dagster, then query it. A partition
    whose run fails is reported in one line (the stack trace in a log file) and the others go on; the exit
    status is 1 when any failed."""
    from pgrag_dag.assets.demo import run_demo

    try:
        failed = run_demo()
    except PgragError as exc:
        _fail(exc)
    if failed:
        raise typer.Exit(1)


@app.command()
def index(partition: Annotated[str, typer.Argument(help="<realm>.<space>: the space as in pgrag.yaml (quote it "
                                                        "if it has blanks), or its Dagster partition key")],
          allow_empty: Annotated[bool, typer.Option("--allow-empty", help="allow sources that name no document "
                                                   "to remove every document of an indexed space")] = False,
          full: Annotated[bool, typer.Option("--full", help="recompute the gate decisions, entities, relations and "
                                             "vector audit over the whole space, not only what changed (same result)")] = False,
          as_json: Annotated[bool, typer.Option("--json", help="print every stage's metadata and the checks as one "
                                                "JSON document instead of the summary")] = False,
          ) -> None:
    """Run the eight stages for one partition as a plain pipeline (no Dagster), with a progress bar per
    stage on stderr, then print the summary. Each stage works on what changed since its last run; ``--full``
    recomputes the whole space. A failed stage is one line on stderr (exit 2), its stack trace in
    ``<data_dir>/logs/pgrag-errors.log``."""
    import os

    from rich.console import Console

    from pgrag_dag import cli_progress
    from pgrag_dag.config import load_settings
    from pgrag_dag.embedding import model_warning
    from pgrag_dag.engine import Engine
    from pgrag_dag.names import parse_partition
    from pgrag_dag.pipeline import index_documents
    from pgrag_dag.summary import stage_metas, summarise

    if allow_empty:
        os.environ["PGRAG_OPERATIONS__ALLOW_EMPTY"] = "true"
    console = Console(stderr=True)
    try:
        settings = load_settings()
        realm, space = parse_partition(partition, [(r, s) for r, spec in settings.realms.items() for s in spec.spaces])
        with contextlib.closing(Engine.from_settings(settings)) as engine, \
                cli_progress.watching(console) as (display, once):
            if warning := model_warning(settings.embedding.model):
                once.say(warning)
            engine.import_cassettes()
            try:
                results = index_documents(engine, realm, space, full=full)
            except KeyboardInterrupt:  # Ctrl-C: said, not silent
                console.print(f"interrupted: the stages that had finished are kept; `pgrag index {shlex.quote(partition)}` "
                              "goes on from there (the interrupted stage redoes what it had not committed)",
                              markup=False, highlight=False, soft_wrap=True)
                raise typer.Exit(130) from None
            except Exception as exc:  # one line; the trace to the log file
                where = cli_progress.run_failure_where(exc, display, f"{realm}.{space}")
                cli_progress.report_failure(console, settings.resolve(settings.data_dir), exc, where)
                raise typer.Exit(2) from None
            for r in results:  # a red check is said once, plainly
                for name, (ok, meta) in r.checks.items():
                    if not ok:
                        once.say(f"check {r.stage}:{name} failed: {meta.get('reason') or _check_facts(meta)}")
    except PgragError as exc:
        _fail(exc)
    metas = stage_metas(results)
    if as_json:
        typer.echo(json.dumps({"partition": f"{realm}.{space}", "stages": {r.stage: r.metadata for r in results},
                               "checks": metas["_checks"], "graph_quality": metas["_quality"]}, default=str, indent=2))
    else:
        typer.echo("\n".join(summarise(f"{realm}.{space}", metas)))


def _check_facts(meta: dict[str, Any]) -> str:
    """A failed check's metadata for people: ``key value`` pairs in the check's order, empty ones left out
    (``documents_skipped 3; skipped ["a.pdf: not UTF-8 text", ...]``)."""
    return "; ".join(f"{k} {v if isinstance(v, (int, float, str)) else json.dumps(v, default=str, ensure_ascii=False)}"
                     for k, v in meta.items() if v not in (None, "", [], {})) or "(no details)"


def _query_target(settings, realm: str | None, space: str | None) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """``--realm`` / ``--space`` when given; else the first realm the configuration declares, and that realm's first
    space. Raises :class:`ConfigurationError` saying which option to pass when there is none to default to (no
    realm declared, or a ``--realm`` that declares no space)."""
    from pgrag_dag.errors import ConfigurationError

    declared = [(r, s) for r, spec in settings.realms.items() for s in spec.spaces]
    if realm is None:
        if not declared:
            raise ConfigurationError("no space is declared in the configuration (PGRAG_CONFIG or ./pgrag.yaml): pass "
                                     "--realm (and --space), or write one with `pgrag init`")
        realm = declared[0][0]
    if space is None:
        space = next((s for r, s in declared if r == realm), None)
        if space is None:
            realms = ", ".join(dict.fromkeys(r for r, _ in declared)) or "none"
            raise ConfigurationError(f"realm {realm!r} declares no space in the configuration (declared realms: "
                                     f"{realms}): pass --space")
    return realm, space


@app.command()
def query(
    question: str,
    realm: Annotated[Optional[str], typer.Option(help="realm to read (default: the first the configuration "
                                                      "declares)")] = None,
    space: Annotated[Optional[str], typer.Option(help="space to read, or '*' for every space (read-only); default: "
                                                      "the realm's first declared space")] = None,
    mode: Annotated[Optional[str], typer.Option(help="mix | local | global | hybrid | naive | bypass")] = None,
    top_k: Annotated[Optional[int], typer.Option(help="entities matched")] = None,
    chunk_top_k: Annotated[Optional[int], typer.Option(help="passages by chunk search")] = None,
    chunk_channel: Annotated[Optional[list[str]], typer.Option(help="chunk search channel: vector | fulltext (repeatable; two are fused by RRF)")] = None,
    max_hops: Annotated[Optional[int], typer.Option(help="traversal depth")] = None,
    max_relation_edges: Annotated[Optional[int], typer.Option(help="relations one matched entity may contribute")] = None,
    relation_type: Annotated[Optional[list[str]], typer.Option(help="restrict relations to this predicate (repeatable)")] = None,
    fusion: Annotated[Optional[str], typer.Option(help="rrf | quota")] = None,
    keywords: Annotated[Optional[str], typer.Option(help="model | lexical | off")] = None,
    mmr: Annotated[Optional[bool], typer.Option("--mmr/--no-mmr", help="maximal marginal relevance over relations")] = None,
    node_distance: Annotated[Optional[bool], typer.Option("--node-distance/--no-node-distance", help="rerank relations by graph distance")] = None,
    max_passage_tokens: Annotated[Optional[int], typer.Option(help="cap on the passages block (tokens = chars/4)")] = None,
    as_of: Annotated[Optional[str], typer.Option(help="valid-time date YYYY, YYYY-MM or YYYY-MM-DD; undated relations always match")] = None,
    as_believed_at: Annotated[Optional[str], typer.Option(help="belief-time ISO-8601 instant (naive = UTC): the graph as believed then")] = None,
    include_superseded: Annotated[Optional[bool], typer.Option("--include-superseded/--no-include-superseded", help="also return superseded relations, marked")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the retrieved data as JSON, no synthesis")] = False,
    stream: Annotated[bool, typer.Option("--stream", help="print the answer as the model writes it (a cached or "
                                         "replayed answer at once)")] = False,
) -> None:
    """Answer a question, then list its sources: each passage the context numbered, by its number, with
    doc_key, title, chunk index and an excerpt, marked "cited" when the answer cites it. With --json, print
    what was retrieved instead (no model call). Offline (``llm.models`` only ``replay``) a question never recorded
    prints its sources alone, with a warning. Warnings (e.g. a filter that matches nothing) go to stderr,
    once each. Options not given take the
    ``retrieval:`` defaults of pgrag.yaml, then the built-in ones (mode mix, top_k 10, 2 hops, ...); without
    --realm and --space it reads the first space the configuration declares."""
    from pgrag_dag.citations import source_lines, sources
    from pgrag_dag.embedding import model_warning
    from pgrag_dag.errors import ReplayMissError
    from pgrag_dag.llm import REPLAY
    from pgrag_dag.query import QueryParam, query_data, synthesise

    shown = _Shown()
    res = None
    offline = False
    try:  # the query log's warnings are printed once, below, not logged too; the engine's close closes its pool
        with _quiet("pgrag_dag.query", "pgrag_dag.keywords"), contextlib.closing(_engine()) as engine:
            given = {"mode": mode, "top_k": top_k, "chunk_top_k": chunk_top_k, "chunk_channels": chunk_channel or None,
                     "max_hops": max_hops, "max_relation_edges": max_relation_edges, "relation_types": relation_type or None,
                     "fusion": fusion, "keywords": keywords, "mmr": mmr, "node_distance_rerank": node_distance,
                     "max_passage_tokens": max_passage_tokens, "as_of": as_of, "as_believed_at": as_believed_at,
                     "include_superseded": include_superseded}
            realm, space = _query_target(engine.settings, realm, space)
            # options not given keep the configured retrieval defaults (pgrag.yaml ``retrieval:``), then QueryParam's
            param = QueryParam.from_settings(engine.settings.retrieval, space=space,
                                             **{k: v for k, v in given.items() if v is not None})
            if as_json:
                res = query_data(question, param, dsn=engine.dsn, realm=realm, embedder=engine.embedder(),
                                 client=engine.client() if param.keywords == "model" else None,
                                 telemetry=engine.settings.telemetry)
                _warn(res.warnings)
                typer.echo(json.dumps({"keywords": res.keywords, "entities": res.entities, "relations": res.relations,
                                       "chunks": res.chunks, "communities": res.communities,
                                       "warnings": res.warnings, "assembly": res.assembly}, default=str, indent=2))
                return
            offline = set(engine.settings.llm.models) == {REPLAY}
            res = query_data(question, param, dsn=engine.dsn, realm=realm, embedder=engine.embedder(),
                             client=engine.client(), telemetry=engine.settings.telemetry)
            hashing = model_warning(engine.settings.embedding.model)  # answers from word hashing are weak: say so
            _warn(res.warnings + ([hashing] if hashing else []))  # before the model is asked: a failed synthesis leaves them said
            answer = synthesise(question, res, param, engine.client(), on_text=shown.append if stream else None)
    except ReplayMissError as exc:
        lines = list(source_lines(sources(res))) if res is not None and offline else []
        if lines:  # offline by configuration (llm.models: [replay]): what retrieval found is the answer we have
            typer.echo("warning: no model writes answers offline (llm.models: [replay]) and this question was never "
                       "recorded: the passages retrieval found follow; name a live model in llm.models for answers",
                       err=True)
            typer.echo("\n".join(lines))
            return
        typer.echo(f"error: {type(exc).__name__}: {exc} (`pgrag query --json` shows what retrieval found, with no "
                   "model)", err=True)
        raise typer.Exit(2) from None
    except PgragError as exc:
        if shown:
            typer.echo("")  # end a broken stream's line before the error
        _fail(exc)
    if not stream:
        typer.echo(answer)
    elif not answer.endswith("\n"):
        typer.echo("")  # end the streamed answer's line
    lines = list(source_lines(sources(res, answer)))
    if lines:
        typer.echo("\n" + "\n".join(lines))


@contextlib.contextmanager
def _quiet(*loggers: str) -> Iterator[None]:
    """Only errors of ``loggers`` are logged meanwhile."""
    logs = [logging.getLogger(name) for name in loggers]
    levels = [log.level for log in logs]
    for log in logs:
        log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for log, level in zip(logs, levels):
            log.setLevel(level)


class _Shown(list[str]):
    """The pieces of a streamed answer, each printed (and flushed) as it is appended."""

    def append(self, text: str) -> None:
        super().append(text)
        typer.echo(text, nl=False)
        sys.stdout.flush()


def _warn(warnings: list[str]) -> None:
    """Each distinct warning once, as ``warning: ...`` on stderr."""
    for w in dict.fromkeys(warnings):
        typer.echo(f"warning: {w}", err=True)


@app.command()
def changes(partition: Annotated[str, typer.Argument(help="<realm>.<space>, as for pgrag index")],
            since: Annotated[Optional[str], typer.Option("--since", help="the watermark a previous call printed "
                                                         "last; omitted: every change from the beginning")] = None,
            as_json: Annotated[bool, typer.Option("--json", help="print the whole change set as JSON")] = False) -> None:
    """What a space's graph and documents gained since a watermark (relations added, superseded, restored,
    dormant, revived; entities; documents), whether its communities lag behind, and the next watermark
    (last line) to pass as --since next time: every change is reported once."""
    from pgrag_dag.changes import changes_since
    from pgrag_dag.config import load_settings
    from pgrag_dag.names import parse_partition
    from pgrag_dag.store import db

    try:
        settings = load_settings()
        realm, space = parse_partition(partition, [(r, s) for r, spec in settings.realms.items() for s in spec.spaces])
        cs = changes_since(db.resolve_dsn(settings.database_url, settings.resolve(settings.data_dir)), realm, space, since)
    except PgragError as exc:
        _fail(exc)
    typer.echo(json.dumps(cs.as_dict(), default=str, indent=2) if as_json else "\n".join(cs.summary()))


@app.command()
def reembed(realm: Annotated[str, typer.Argument(help="the realm to switch to the configured embedder")],
            force: Annotated[bool, typer.Option("--force", help="re-embed even when the realm is registered "
                                                "under the configured embedder")] = False,
            as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False) -> None:
    """Re-embed every vector of a realm with the configured embedder (``embedding:`` in pgrag.yaml) and
    rebuild its vector columns and HNSW indexes in place, in one transaction: on any failure nothing
    changes. Stages of the realm wait meanwhile; queries wait only for the final write."""
    from pgrag_dag.cli_progress import reembed_progress
    from pgrag_dag.reembed import reembed_realm, summary

    try:
        with contextlib.closing(_engine()) as engine, reembed_progress(realm) as progress:
            result = reembed_realm(engine, realm, force=force, progress=progress)
    except PgragError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        typer.echo(f"interrupted: realm {realm} is unchanged (still its previous embedder)", err=True)
        raise typer.Exit(130) from None
    typer.echo(json.dumps(result, indent=2) if as_json else summary(result))


def _partition(engine, text: str) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    from pgrag_dag.names import parse_partition

    return parse_partition(text, [(r, s) for r, spec in engine.settings.realms.items() for s in spec.spaces])


Partition = Annotated[str, typer.Argument(help="<realm>.<space>, as in pgrag.yaml (or its Dagster partition key)")]
AsJson = Annotated[bool, typer.Option("--json", help="print the result as JSON")]


@app.command()
def coverage(partition: Partition,
             limit: Annotated[int, typer.Option(help="communities and entities listed")] = 20,
             as_json: AsJson = False) -> None:
    """Which communities got least retrieval attention, and which live entities were never retrieved
    (needs telemetry.coverage on while the queries ran)."""
    from pgrag_dag.coverage import coverage as read_coverage
    from pgrag_dag.coverage import summary_lines

    try:
        with contextlib.closing(_engine()) as engine:
            report = read_coverage(engine.dsn, *_partition(engine, partition), limit=limit)
    except PgragError as exc:
        _fail(exc)
    typer.echo(json.dumps(report, default=str, indent=2) if as_json else "\n".join(summary_lines(report)))


@app.command()
def retention(partition: Partition,
              apply: Annotated[bool, typer.Option("--apply", help="archive them (default: a dry run)")] = False,
              as_json: AsJson = False) -> None:
    """Score the space's live entities (retrieval recency and frequency, degree, belief-time age) and list
    the least valuable, which --apply archives (reversible: pgrag unarchive). Needs coverage telemetry."""
    from pgrag_dag import retention as ret

    try:
        with contextlib.closing(_engine()) as engine:
            realm, space = _partition(engine, partition)
            result = ret.apply(engine, realm, space) if apply else ret.plan(engine, realm, space)
    except PgragError as exc:
        _fail(exc)
    typer.echo(json.dumps(result, default=str, indent=2) if as_json else "\n".join(ret.summary_lines(result)))


@app.command()
def unarchive(partition: Partition, names: Annotated[list[str], typer.Argument(help="entity names")],
              as_json: AsJson = False) -> None:
    """Unarchive entities: live again when a chunk still mentions them."""
    from pgrag_dag import retention as ret

    try:
        with contextlib.closing(_engine()) as engine:
            result = ret.unarchive(engine, *_partition(engine, partition), names)
    except PgragError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps(result, default=str, indent=2))
        return
    for e in result["unarchived"]:
        typer.echo(f"unarchived {e['name']}" + ("" if e["revived"] else " (stays dormant: no chunk mentions it)"))
    for name in result["not_archived"]:
        typer.echo(f"{name} was not archived")


@app.command()
def ui(host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
       port: Annotated[int, typer.Option(help="port")] = 3000) -> None:
    """Open the Dagster UI (dg dev -w workspace.yaml) on the project's instance and database. Outside the
    repository (a folder ``pgrag init`` made) the workspace file is written into the Dagster home."""
    import os
    import shutil

    from pgrag_dag.assets.runner import dagster_home, ui_argv
    from pgrag_dag.config import load_settings

    import dagster as dg

    from pgrag_dag.assets.slots import ensure_pool_limits
    from pgrag_dag.store import db

    try:
        settings = load_settings()
        home = dagster_home(settings)  # starts the embedded database, exports DAGSTER_HOME
        with dg.DagsterInstance.from_config(str(home)) as instance:  # runs the UI launches never race on it
            ensure_pool_limits(instance, db.resolve_dsn(settings.database_url, settings.resolve(settings.data_dir)))
    except PgragError as exc:
        _fail(exc)
    workspace = Path("workspace.yaml")
    if not workspace.is_file():  # the code location is the installed package's, wherever the user stands
        workspace = Path(home) / "workspace.yaml"
        workspace.write_text(WORKSPACE, encoding="utf-8")
    beside = Path(sys.executable).with_name("dg")  # this venv's, also when it is not activated (.venv/bin/pgrag ui)
    argv = ui_argv(host, port, workspace=str(workspace), exe=str(beside) if beside.is_file() else shutil.which("dg") or "dg")
    typer.echo(f"Dagster home {home}; UI on http://{host}:{port}")
    os.execvp(argv[0], argv)


@app.command()
def slots(free: Annotated[bool, typer.Option("--free", help="mark gone runs failed, free orphaned slots")] = False,
          as_json: Annotated[bool, typer.Option("--json", help="print the pools as JSON")] = False) -> None:
    """List the Dagster instance's pools (limit, claimed and waiting slots, each with its run, the run's
    status and whether it is orphaned); with --free, reclaim the orphans first: runs of this host whose
    process is gone are marked failed, and slots of those and of ended runs are freed."""
    from dataclasses import asdict

    import dagster as dg

    from pgrag_dag.assets import slots as pool_slots
    from pgrag_dag.assets.runner import dagster_home
    from pgrag_dag.config import load_settings

    try:
        home = dagster_home(load_settings())
    except PgragError as exc:
        _fail(exc)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        freed = pool_slots.reclaim(instance, log_each=False) if free else []  # echoed below
        pools = pool_slots.inspect_pools(instance)
    if as_json:
        typer.echo(json.dumps({"freed": [r.as_dict() for r in freed],
                               "pools": [{**asdict(p), "in_use": p.in_use} for p in pools]}, indent=2))
        return
    for r in freed:
        typer.echo(r.describe())
    if free and not freed:
        typer.echo("nothing orphaned to free")
    for p in pools:
        waiting = sum(h.state == "waiting" for h in p.holders)
        limit = "no limit" if p.limit is None else f"limit {p.limit}{' (default)' if p.from_default else ''}"
        typer.echo(f"pool {p.pool}: {limit}, {p.in_use} in use, {waiting} waiting")
        for h in p.holders:
            mark = "ORPHANED" if h.orphaned else "held"
            typer.echo(f"  {h.state:<8} run {h.run_id} step {h.step_key} {h.status}: {mark} ({h.reason})")
    orphans = sum(h.orphaned for p in pools for h in p.holders)
    if orphans:
        typer.echo(f"{orphans} orphaned; `pgrag slots --free` frees them")


@app.command("stop-db")
def stop_db() -> None:
    """Stop the embedded PostgreSQL of the configured data directory (it keeps running otherwise)."""
    from pgrag_dag.config import load_settings
    from pgrag_dag.store import db

    try:
        settings = load_settings()
        if settings.database_url:
            typer.echo("an external database is configured (PGRAG_DATABASE_URL); nothing to stop")
            return
        stopped = db.stop_embedded(settings.resolve(settings.data_dir))
    except PgragError as exc:
        _fail(exc)
    typer.echo("embedded PostgreSQL stopped" if stopped else "no embedded PostgreSQL was running")


@cassette_app.command("export")
def cassette_export(path: Path, purpose: Annotated[Optional[str], typer.Option(help="purpose prefix")] = None) -> None:
    """Write the response cache to a JSONL cassette."""
    from pgrag_dag.store import cache, db, schema

    try:
        engine = _engine()
        with db.database_errors(engine.dsn), engine.connect(autocommit=True) as conn:
            schema.init_control(conn)
            typer.echo(f"{cache.export_cassette(conn, path, purpose_prefix=purpose)} responses written to {path}")
    except PgragError as exc:
        _fail(exc)


@cassette_app.command("import")
def cassette_import(path: Path) -> None:
    """Load a JSONL cassette into the response cache (idempotent)."""
    from pgrag_dag.store import cache, db, schema

    try:
        engine = _engine()
        with db.database_errors(engine.dsn), engine.connect(autocommit=True) as conn:
            schema.init_control(conn)
            with conn.transaction():
                typer.echo(f"{cache.import_cassette(conn, path)} responses read from {path}")
    except PgragError as exc:
        _fail(exc)


@cache_app.command("evict")
def cache_evict(
    prompt_key: Annotated[Optional[str], typer.Option("--prompt-key", help="evict every cached response to this "
                                                      "prompt (its key or first 16 digits, as an error shows it)")] = None,
    parse_errors: Annotated[bool, typer.Option("--parse-errors", help="evict the responses behind --space's "
                                               "extraction passes that still do not parse; the next run asks again")] = False,
    space: Annotated[Optional[str], typer.Option("--space", help="<realm>.<space> for --parse-errors")] = None,
) -> None:
    """Remove poison responses from the response cache and say what was removed; a cassette import
    never brings them back."""
    from pgrag_dag.cache_evict import evict_parse_errors, evict_prompt
    from pgrag_dag.errors import ConfigurationError
    from pgrag_dag.names import split_partition_key

    try:
        if (prompt_key is None) == (not parse_errors) or (parse_errors and space is None):
            raise ConfigurationError("give either --prompt-key KEY or --parse-errors --space REALM.SPACE")
        with contextlib.closing(_engine()) as engine:
            done = (evict_prompt(engine, prompt_key) if prompt_key is not None
                    else evict_parse_errors(engine, *split_partition_key(space)))  # type: ignore[arg-type]
    except PgragError as exc:
        _fail(exc)
    for line in done.lines():
        typer.echo(line)


from pgrag_dag import cli_inspect  # noqa: E402,F401  (registers its commands)
from pgrag_dag import cli_graph  # noqa: E402,F401  (registers its commands)
from pgrag_dag import cli_project  # noqa: E402,F401  (registers its commands)
from pgrag_dag import cli_delete  # noqa: E402,F401  (registers its commands)


def _short_helps(typer_app: typer.Typer) -> None:
    """Give every command of ``typer_app`` (and of its sub-apps) a one-sentence ``short_help`` — the first
    sentence of its docstring — so ``pgrag --help`` lists the commands in a line or two each; ``pgrag
    <command> --help`` still shows the whole docstring, its reStructuredText ````code```` marks as a
    terminal shows code (```code```)."""
    for command in typer_app.registered_commands:
        raw = inspect.getdoc(command.callback) or "" if command.callback else ""
        if command.help is None and raw:
            command.help = raw.replace("``", "`")
        doc = " ".join(raw.replace("``", "`").split())
        if command.short_help is None and doc:
            command.short_help = doc.split(". ", 1)[0].rstrip(".") + "."
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _short_helps(group.typer_instance)


_short_helps(app)


def main() -> None:  # pragma: no cover - console entry
    logging.basicConfig(level=logging.WARNING)
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
