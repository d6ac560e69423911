"""The operations on indexed spaces: ``changes``, ``reembed``, ``coverage``, ``retention``, ``unarchive``,
``ui``, ``slots``, ``stop-db``, ``cassette export|import`` and ``cache evict``."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, cast

import typer

from pgrag_dag.cli.common import (
    AsJson,
    OptionalPartition,
    Partition,
    app,
    cache_app,
    cassette_app,
    fail,
    open_engine,
    resolve_partition,
)
from pgrag_dag.errors import PgragError

WORKSPACE = """load_from:
  - python_module:
      module_name: pgrag_dag.assets.definitions
      attribute: defs
      location_name: pgrag
"""
"""The Dagster workspace of the code location: the repository's ``workspace.yaml``, written into the Dagster
home by ``pgrag ui`` where there is none."""


@app.command()
def changes(
    partition: Annotated[str, typer.Argument(help="<realm>.<space>, as for pgrag index")],
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="the watermark a previous call printed last; omitted: every change from the beginning",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the whole change set as JSON")] = False,
) -> None:
    """What a space's graph and documents gained since a watermark (relations added, superseded, restored,
    dormant, revived; entities; documents), whether its communities lag behind, and the next watermark
    (last line) to pass as --since next time: every change is reported once."""
    from pgrag_dag.config.load import load_settings
    from pgrag_dag.names import parse_partition
    from pgrag_dag.operate.changes import changes_since
    from pgrag_dag.store import db

    try:
        settings = load_settings(required=True)
        realm, space = parse_partition(
            partition, [(r, s) for r, spec in settings.realms.items() for s in spec.spaces]
        )
        cs = changes_since(
            db.resolve_dsn(settings.database_url, settings.resolve(settings.data_dir)), realm, space, since
        )
    except PgragError as exc:
        fail(exc)
    typer.echo(json.dumps(cs.as_dict(), default=str, indent=2) if as_json else "\n".join(cs.summary()))


@app.command()
def reembed(
    realm: Annotated[str, typer.Argument(help="the realm to switch to the configured embedder")],
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="re-embed even when the realm is registered under the configured embedder"
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """Re-embed every vector of a realm with the configured embedder (``embedding:`` in pgrag.yaml) and
    rebuild its vector columns and HNSW indexes in place, in one transaction: on any failure nothing
    changes. Stages of the realm wait meanwhile; queries wait only for the final write."""
    from pgrag_dag.cli.progress import reembed_progress
    from pgrag_dag.operate.reembed import reembed_realm, summary

    try:
        with contextlib.closing(open_engine()) as engine, reembed_progress(realm) as progress:
            result = reembed_realm(engine, realm, force=force, progress=progress)
    except PgragError as exc:
        fail(exc)
    except KeyboardInterrupt:
        typer.echo(f"interrupted: realm {realm} is unchanged (still its previous embedder)", err=True)
        raise typer.Exit(130) from None
    typer.echo(json.dumps(result, indent=2) if as_json else summary(result))


@app.command()
def coverage(
    partition: OptionalPartition = None,
    limit: Annotated[int, typer.Option(help="communities and entities listed")] = 20,
    as_json: AsJson = False,
) -> None:
    """Which communities got least retrieval attention, and which live entities were never retrieved
    (needs telemetry.coverage on while the queries ran; said when it is off)."""
    from pgrag_dag.operate.coverage import coverage as read_coverage
    from pgrag_dag.operate.coverage import summary_lines

    try:
        with contextlib.closing(open_engine()) as engine:
            report = read_coverage(
                engine.dsn,
                *resolve_partition(engine, partition),
                limit=limit,
                recording=engine.settings.telemetry.coverage,
            )
    except PgragError as exc:
        fail(exc)
    typer.echo(json.dumps(report, default=str, indent=2) if as_json else "\n".join(summary_lines(report)))


@app.command()
def retention(
    partition: Partition,
    apply: Annotated[bool, typer.Option("--apply", help="archive them (default: a dry run)")] = False,
    as_json: AsJson = False,
) -> None:
    """Score the space's live entities (retrieval recency and frequency, degree, belief-time age) and list
    the least valuable, which --apply archives (reversible: pgrag unarchive). Needs coverage telemetry."""
    from pgrag_dag.operate import retention as ret

    try:
        with contextlib.closing(open_engine()) as engine:
            realm, space = resolve_partition(engine, partition)
            result = ret.apply(engine, realm, space) if apply else ret.plan(engine, realm, space)
    except PgragError as exc:
        fail(exc)
    typer.echo(json.dumps(result, default=str, indent=2) if as_json else "\n".join(ret.summary_lines(result)))


@app.command()
def unarchive(
    partition: Partition,
    names: Annotated[list[str], typer.Argument(help="entity names")],
    as_json: AsJson = False,
) -> None:
    """Unarchive entities: live again when a chunk still mentions them."""
    from pgrag_dag.operate import retention as ret

    try:
        with contextlib.closing(open_engine()) as engine:
            result = ret.unarchive(engine, *resolve_partition(engine, partition), names)
    except PgragError as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps(result, default=str, indent=2))
        return
    for e in result["unarchived"]:
        typer.echo(
            f"unarchived {e['name']}" + ("" if e["revived"] else " (stays dormant: no chunk mentions it)")
        )
    for name in result["not_archived"]:
        typer.echo(f"{name} was not archived")


@app.command()
def ui(
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 3000,
) -> None:
    """Open the Dagster UI (dg dev -w workspace.yaml) on the project's instance and database. Outside the
    repository (a folder ``pgrag init`` made) the workspace file is written into the Dagster home."""
    import os
    import shutil

    import dagster as dg

    from pgrag_dag.assets.runner import dagster_home, ui_argv
    from pgrag_dag.assets.slots import ensure_pool_limits
    from pgrag_dag.config.load import load_settings
    from pgrag_dag.store import db

    try:
        settings = load_settings(required=True)
        home = dagster_home(settings)  # starts the embedded database, exports DAGSTER_HOME
        with dg.DagsterInstance.from_config(str(home)) as instance:  # runs the UI launches never race on it
            ensure_pool_limits(
                instance, db.resolve_dsn(settings.database_url, settings.resolve(settings.data_dir))
            )
    except PgragError as exc:
        fail(exc)
    workspace = Path("workspace.yaml")
    if not workspace.is_file():  # the code location is the installed package's, wherever the user stands
        workspace = Path(home) / "workspace.yaml"
        workspace.write_text(WORKSPACE, encoding="utf-8")
    beside = Path(sys.executable).with_name(
        "dg"
    )  # this venv's, also when it is not activated (.venv/bin/pgrag ui)
    argv = ui_argv(
        host,
        port,
        workspace=str(workspace),
        exe=str(beside) if beside.is_file() else shutil.which("dg") or "dg",
    )
    typer.echo(f"Dagster home {home}; UI on http://{host}:{port}")
    os.execvp(argv[0], argv)


@app.command()
def slots(
    free: Annotated[bool, typer.Option("--free", help="mark gone runs failed, free orphaned slots")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the pools as JSON")] = False,
) -> None:
    """List the Dagster instance's pools (limit, claimed and waiting slots, each with its run, the run's
    status and whether it is orphaned); with --free, reclaim the orphans first: runs of this host whose
    process is gone are marked failed, and slots of those and of ended runs are freed."""
    from dataclasses import asdict

    import dagster as dg

    from pgrag_dag.assets import slots as pool_slots
    from pgrag_dag.assets.runner import dagster_home
    from pgrag_dag.config.load import load_settings

    try:
        home = dagster_home(load_settings(required=True))
    except PgragError as exc:
        fail(exc)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        freed = pool_slots.reclaim(instance, log_each=False) if free else []  # echoed below
        pools = pool_slots.inspect_pools(instance)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "freed": [r.as_dict() for r in freed],
                    "pools": [{**asdict(p), "in_use": p.in_use} for p in pools],
                },
                indent=2,
            )
        )
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
def stop_db(
    force: Annotated[
        bool, typer.Option("--force", help="stop it even while a run is indexing (the run then fails)")
    ] = False,
) -> None:
    """Stop the embedded PostgreSQL of the configured data directory (it keeps running otherwise). Refused
    while a run is indexing a space (``pgrag index``, the demo, a Dagster run), naming it, unless
    ``--force``."""
    from pgrag_dag.config.load import load_settings
    from pgrag_dag.store import db, locks

    try:
        settings = load_settings(required=True)
        if settings.database_url:
            typer.echo("an external database is configured (PGRAG_DATABASE_URL); nothing to stop")
            return
        data_dir = settings.resolve(settings.data_dir)
        if not force and db.embedded_pid(data_dir) is not None:
            with db.connect(db.embedded_dsn(data_dir), autocommit=True, vector=False) as conn:
                running = locks.indexing(conn)
            if running:  # a trial's stop-db under a running index failed that run a minute later
                typer.echo(
                    f"not stopped: a run is indexing ({'; '.join(running)}); wait for it to finish, "
                    "or `pgrag stop-db --force` (the run then fails and resumes on its next start)",
                    err=True,
                )
                raise typer.Exit(1)
        stopped = db.stop_embedded(data_dir)
    except PgragError as exc:
        fail(exc)
    typer.echo("embedded PostgreSQL stopped" if stopped else "no embedded PostgreSQL was running")


@cassette_app.command("export")
def cassette_export(
    path: Path, purpose: Annotated[str | None, typer.Option(help="purpose prefix")] = None
) -> None:
    """Write the response cache to a JSONL cassette."""
    from pgrag_dag.store import cache, db, schema

    try:
        engine = open_engine()
        with db.database_errors(engine.dsn), engine.connect(autocommit=True) as conn:
            schema.init_control(conn)
            typer.echo(
                f"{cache.export_cassette(conn, path, purpose_prefix=purpose)} responses written to {path}"
            )
    except PgragError as exc:
        fail(exc)


@cassette_app.command("import")
def cassette_import(path: Path) -> None:
    """Load a JSONL cassette into the response cache (idempotent)."""
    from pgrag_dag.store import cache, db, schema

    try:
        engine = open_engine()
        with db.database_errors(engine.dsn), engine.connect(autocommit=True) as conn:
            schema.init_control(conn)
            with conn.transaction():
                typer.echo(f"{cache.import_cassette(conn, path)} responses read from {path}")
    except PgragError as exc:
        fail(exc)


@cache_app.command("evict")
def cache_evict(
    prompt_key: Annotated[
        str | None,
        typer.Option(
            "--prompt-key",
            help="evict every cached response to this "
            "prompt (its key or first 16 digits, as an error shows it)",
        ),
    ] = None,
    parse_errors: Annotated[
        bool,
        typer.Option(
            "--parse-errors",
            help="evict the responses behind --space's "
            "extraction passes that still do not parse; the next run asks again",
        ),
    ] = False,
    space: Annotated[str | None, typer.Option("--space", help="<realm>.<space> for --parse-errors")] = None,
) -> None:
    """Remove poison responses from the response cache and say what was removed; a cassette import
    never brings them back."""
    from pgrag_dag.errors import ConfigurationError
    from pgrag_dag.names import split_partition_key
    from pgrag_dag.operate.cache_evict import evict_parse_errors, evict_prompt

    try:
        if (prompt_key is None) == (not parse_errors) or (parse_errors and space is None):
            raise ConfigurationError("give either --prompt-key KEY or --parse-errors --space REALM.SPACE")
        with contextlib.closing(open_engine()) as engine:
            done = (
                evict_prompt(engine, prompt_key)
                if prompt_key is not None
                else evict_parse_errors(engine, *split_partition_key(cast(str, space)))
            )
    except PgragError as exc:
        fail(exc)
    for line in done.lines():
        typer.echo(line)
