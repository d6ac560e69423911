"""``pgrag export`` and ``pgrag view``: one space's graph as files (GraphML, Parquet, CSV) and as a
self-contained HTML page (issue 16 items 7–8). Registered on :data:`pgrag_dag.cli.app` by importing this
module (the last import of :mod:`pgrag_dag.cli`)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Annotated

import typer

from pgrag_dag.cli.common import (
    AsJson,
    OptionalPartition,
    app,
    fail,
    open_engine,
    resolve_partition,
)
from pgrag_dag.errors import PgragError


@app.command()
def export(
    partition: OptionalPartition = None,
    fmt: Annotated[
        list[str] | None,
        typer.Option(
            "--format",
            help="graphml | parquet | csv (repeatable; default export.formats: graphml and parquet)",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="directory to write into (its parent must exist); "
            "default <data_dir>/exports/<realm>.<space>/",
        ),
    ] = None,
    include_dormant: Annotated[
        bool,
        typer.Option(
            "--include-dormant",
            help="add the dormant entities and relations (history of removed documents), marked dormant",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Write one space's entities, relations (validity, supersession, denials), communities and mentions for
    Gephi, NetworkX or a notebook: GraphML (one graph file) or Parquet / CSV (one file per table). Dormant
    rows are left out unless --include-dormant."""
    from pgrag_dag.graph.export import export_graph

    try:
        with contextlib.closing(open_engine()) as engine:
            realm, space = resolve_partition(engine, partition)
            result = export_graph(
                engine,
                realm,
                space,
                formats=fmt or engine.settings.export.formats,
                out=out,
                include_dormant=include_dormant,
            )
    except PgragError as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps(result.as_dict(), indent=2))
        return
    rows = ", ".join(f"{n} {t}" for t, n in result.rows.items())
    typer.echo(f"{realm}.{space}: {rows}")
    for path in result.files.values():
        typer.echo(str(path))


@app.command()
def view(
    partition: OptionalPartition = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="the HTML file to write (its directory must exist); "
            "default <data_dir>/views/<realm>.<space>.html",
        ),
    ] = None,
    max_nodes: Annotated[
        int | None,
        typer.Option(
            help="circles per drawing: the largest communities in the overview, the best-connected members "
            "in a community (default export.view_max_nodes, 400)"
        ),
    ] = None,
    no_open: Annotated[
        bool, typer.Option("--no-open", help="write the page and print its path only")
    ] = False,
) -> None:
    """Write the space's graph as one self-contained HTML page (no network needed: open it offline) — an
    overview of the communities that opens into one (also ``#c=<id>`` in the address), the same layout on
    every load, denied and superseded relations drawn apart, search by name (also ``#q=<name>``) — print
    its path and open it in the browser."""
    import webbrowser

    from pgrag_dag.graph.view import write_view

    try:
        with contextlib.closing(open_engine()) as engine:
            realm, space = resolve_partition(engine, partition)
            result = write_view(engine, realm, space, out=out, max_nodes=max_nodes)
    except PgragError as exc:
        fail(exc)
    typer.echo(f"{result.path}  ({result.summary()})")
    if not no_open and not webbrowser.open(result.path.as_uri()):
        typer.echo("no web browser found here: open the file above in one (it needs no network)")
