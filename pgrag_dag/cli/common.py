"""What every ``pgrag`` command module shares: the Typer application and its sub-groups, opening the
engine from the configuration, the one-line error exit, and the partition / realm-and-space arguments.

Command modules import this module, never the package that registers them (:mod:`pgrag_dag.cli`).
"""

from __future__ import annotations

import inspect
import re
from typing import Annotated, NoReturn

import typer

from pgrag_dag.errors import PgragError

HELP = """pgrag: index your documents into a bi-temporal graph in PostgreSQL and ask it questions.

Start with `pgrag init DIR` (a configuration for a folder of documents), then `pgrag index REALM.SPACE`,
`pgrag status`, `pgrag query "..."`, `pgrag view REALM.SPACE`.

Every command reads the settings from PGRAG_CONFIG (default ./pgrag.yaml) and PGRAG_ environment
variables. Errors of the engine are printed as one line and exit with status 2."""
"""``pgrag --help``'s text (paragraphs reflowed by the terminal)."""

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help=re.sub(r"(?<!\n)\n(?!\n)", " ", HELP)
)  # paragraphs reflowed by the terminal
cassette_app = typer.Typer(no_args_is_help=True, help="Export or import recorded model responses (JSONL).")
app.add_typer(cassette_app, name="cassette")
cache_app = typer.Typer(no_args_is_help=True, help="Evict poison responses from the LLM response cache.")
app.add_typer(cache_app, name="cache")


def _version(show: bool) -> None:
    if show:
        from importlib.metadata import version

        typer.echo(f"pgrag {version('pgrag-dag')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool | None,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="print the installed version and exit"
        ),
    ] = None,
) -> None:
    pass  # the options of `pgrag` itself; the commands are below


def open_engine():
    """The engine of the configuration (``PGRAG_CONFIG`` or ``./pgrag.yaml``) and ``PGRAG_`` variables."""
    from pgrag_dag.config.load import load_settings
    from pgrag_dag.engine import Engine

    return Engine.from_settings(load_settings(required=True))


def fail(exc: PgragError) -> NoReturn:
    """Print ``exc`` as one ``error:`` line on stderr and exit with status 2."""
    typer.echo(f"error: {type(exc).__name__}: {exc}", err=True)
    raise typer.Exit(2)


def query_target(settings, realm: str | None, space: str | None) -> tuple[str, str]:
    """``--realm`` / ``--space`` when given; else the first realm the configuration declares, and that realm's
    first space. Raises :class:`ConfigurationError` saying which option to pass when there is none to default
    to: no realm declared; a ``--realm`` without ``--space`` the configuration does not declare (an unknown
    realm: the declared realms are named, or that there are none); a declared realm without a space."""
    from pgrag_dag.errors import ConfigurationError

    declared = [(r, s) for r, spec in settings.realms.items() for s in spec.spaces]
    if realm is None:
        if not declared:
            raise ConfigurationError(
                "no space is declared in the configuration (PGRAG_CONFIG or ./pgrag.yaml): pass "
                "--realm (and --space), or write one with `pgrag init`"
            )
        realm = declared[0][0]
    if space is None:
        space = next((s for r, s in declared if r == realm), None)
        if space is None and realm not in settings.realms:
            raise ConfigurationError(
                f"unknown realm {realm!r}: the configuration (PGRAG_CONFIG or ./pgrag.yaml) declares "
                + (
                    f"realm{'s' if len(settings.realms) > 1 else ''} {', '.join(settings.realms)}"
                    if settings.realms
                    else "no realm (write one with `pgrag init`)"
                )
                + "; an indexed realm it does not declare is read with --realm and --space"
            )
        if space is None:
            raise ConfigurationError(
                f"realm {realm!r} declares no space in the configuration (PGRAG_CONFIG or ./pgrag.yaml): "
                "pass --space"
            )
    return realm, space


def resolve_partition(engine, text: str | None) -> tuple[str, str]:
    """``(realm, space)`` of a ``<realm>.<space>`` argument (or its Dagster partition key) among the declared
    spaces; ``None`` (the argument left out) is the one space the configuration declares
    (:func:`only_space`)."""
    from pgrag_dag.names import parse_partition

    return parse_partition(
        text or only_space(engine.settings),
        [(r, s) for r, spec in engine.settings.realms.items() for s in spec.spaces],
    )


def only_space(settings) -> str:
    """``"<realm>.<space>"`` of the one space the configuration declares, for a command whose partition
    argument was left out. Raises :class:`ConfigurationError` naming the declared spaces when there are none
    or several (then the argument is needed)."""
    from pgrag_dag.errors import ConfigurationError

    declared = [f"{r}.{s}" for r, spec in settings.realms.items() for s in spec.spaces]
    if len(declared) == 1:
        return declared[0]
    raise ConfigurationError(
        "name the space: the configuration declares "
        + (f"{len(declared)} ({', '.join(declared)})" if declared else "none (write one with `pgrag init`)")
    )


Partition = Annotated[
    str, typer.Argument(help="<realm>.<space>, as in pgrag.yaml (or its Dagster partition key)")
]
OptionalPartition = Annotated[
    str | None,
    typer.Argument(
        help="<realm>.<space>, as in pgrag.yaml (or its Dagster partition key); may be left out when the "
        "configuration declares one space"
    ),
]
"""The partition of a command whose only positional argument it is: left out, the one declared space."""
AsJson = Annotated[bool, typer.Option("--json", help="print the result as JSON")]


def short_helps(typer_app: typer.Typer) -> None:
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
            short_helps(group.typer_instance)
