"""pgrag purge document | space: erasure — a document's text and everything derived from it, or a whole
space, removed for good with no history kept (:mod:`pgrag_dag.operate.purge`); a dry run without ``--yes``.
Registered on :data:`pgrag_dag.cli.app` by importing this module."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Annotated, Any

import typer

from pgrag_dag.cli.common import AsJson, Partition, app, fail, open_engine, resolve_partition
from pgrag_dag.errors import PgragError

purge_app = typer.Typer(
    no_args_is_help=True,
    help="Erase a document (its text and everything derived from it, history included) or a whole space "
    "(without --yes: say what would be removed and exit 1).",
)
app.add_typer(purge_app, name="purge")

Yes = Annotated[bool, typer.Option("--yes", help="really purge (without it: say what would go and exit 1)")]


def _purge(run: Callable[..., dict[str, Any]], where: str, *rest: str, yes: bool, as_json: bool) -> None:
    """Run a :mod:`pgrag_dag.operate.purge` function on partition ``where``: a dry run without ``yes``
    (printed, exit 1)."""
    from pgrag_dag.operate.purge import summary_lines

    try:
        with contextlib.closing(open_engine()) as engine:
            result = run(engine, *resolve_partition(engine, where), *rest, dry_run=not yes)
    except PgragError as exc:
        fail(exc)
    typer.echo(json.dumps(result, default=str, indent=2) if as_json else "\n".join(summary_lines(result)))
    if not yes:
        raise typer.Exit(1)


@purge_app.command("document")
def purge_document(partition: Partition, doc_key: str, yes: Yes = False, as_json: AsJson = False) -> None:
    """Erase a document: its chunks and vectors, extractions, cached model responses quoting it, its
    history, the graph rows only it supported and the reports built on it; what others also support is
    derived again from their support. Remove it from the sources too, or the next run indexes it again."""
    from pgrag_dag.operate.purge import purge_document as run

    _purge(run, partition, doc_key, yes=yes, as_json=as_json)


@purge_app.command("space")
def purge_space(partition: Partition, yes: Yes = False, as_json: AsJson = False) -> None:
    """Erase a space: every row of it in every table of its realm and the cached model responses quoting
    its chunks."""
    from pgrag_dag.operate.purge import purge_space as run

    _purge(run, partition, yes=yes, as_json=as_json)
