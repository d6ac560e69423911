"""pgrag delete entity | document | space | realm: removal for good, a dry run without ``--yes``
(:mod:`pgrag_dag.operate.deletion`). Registered on :data:`pgrag_dag.cli.app` by importing this module."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Annotated, Any

import typer

from pgrag_dag.cli.common import AsJson, Partition, app, fail, open_engine, resolve_partition
from pgrag_dag.errors import PgragError

delete_app = typer.Typer(
    no_args_is_help=True,
    help="Delete an entity, a document, a space or a realm (a document "
    "keeps its history, the others take theirs along; without --yes: say what would be removed "
    "and exit 1).",
)
app.add_typer(delete_app, name="delete")

Yes = Annotated[bool, typer.Option("--yes", help="really delete (without it: say what would go and exit 1)")]


def _delete(
    run: Callable[..., dict[str, Any]],
    where: str,
    *rest: str,
    yes: bool,
    as_json: bool,
    whole_realm: bool = False,
) -> None:
    """Run a :mod:`pgrag_dag.operate.deletion` function on ``where`` (a partition, or a realm with
    ``whole_realm``): a dry run without ``yes`` (printed, exit 1)."""
    from pgrag_dag.operate.deletion import summary_lines

    try:
        with contextlib.closing(open_engine()) as engine:
            scope = (where,) if whole_realm else resolve_partition(engine, where)
            result = run(engine, *scope, *rest, dry_run=not yes)
    except PgragError as exc:
        fail(exc)
    typer.echo(json.dumps(result, default=str, indent=2) if as_json else "\n".join(summary_lines(result)))
    if not yes:
        raise typer.Exit(1)


@delete_app.command("entity")
def delete_entity(partition: Partition, name: str, yes: Yes = False, as_json: AsJson = False) -> None:
    """Delete an entity with its relations, mentions, memberships and history; refused while a chunk
    mentions it (archive it, or delete those documents first)."""
    from pgrag_dag.operate.deletion import delete_entity as run

    _delete(run, partition, name, yes=yes, as_json=as_json)


@delete_app.command("document")
def delete_document(partition: Partition, doc_key: str, yes: Yes = False, as_json: AsJson = False) -> None:
    """Remove a document and rebuild the graph from the stored extractions (its history is kept). Remove
    it from the sources too, or the next run indexes it again."""
    from pgrag_dag.operate.deletion import delete_document as run

    _delete(run, partition, doc_key, yes=yes, as_json=as_json)


@delete_app.command("space")
def delete_space(partition: Partition, yes: Yes = False, as_json: AsJson = False) -> None:
    """Delete every row of a space in every table of its realm, history included."""
    from pgrag_dag.operate.deletion import delete_space as run

    _delete(run, partition, yes=yes, as_json=as_json)


@delete_app.command("realm")
def delete_realm(
    realm: Annotated[str, typer.Argument(help="the realm to drop")], yes: Yes = False, as_json: AsJson = False
) -> None:
    """Drop a realm: its schema with every table and its registry row."""
    from pgrag_dag.operate.deletion import delete_realm as run

    _delete(run, realm, yes=yes, as_json=as_json, whole_realm=True)
