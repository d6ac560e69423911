"""pgrag init and pgrag add (issue 16 item 1): a configuration for a folder of documents, without
hand-editing YAML (:mod:`pgrag_dag.operate.project`)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated

import typer

from pgrag_dag.cli.common import app, fail
from pgrag_dag.errors import PgragError
from pgrag_dag.operate.project import Written


def _sources(w: Written) -> list[str]:
    """One line per registered source with the files it names now; a source naming none says so plainly
    (a mistyped glob would otherwise index nothing without a word)."""
    return [
        f"  source {path}"
        + (f"  glob {glob}" if glob else "")
        + f"  ({n} file(s) now)"
        + ("  warning: no file matches yet — check the path and glob" if n == 0 else "")
        for path, glob, n in w.sources
    ]


def _next(config: Path, realm: str, space: str) -> list[str]:
    """The commands to run next, with ``PGRAG_CONFIG`` unless ``config`` is ``./pgrag.yaml`` here."""
    here = config.resolve() == (Path.cwd() / "pgrag.yaml").resolve()
    env = "" if here else f"PGRAG_CONFIG={shlex.quote(str(config))} "
    partition = shlex.quote(f"{realm}.{space}")
    return [
        "next:",
        f"  {env}pgrag index {partition}",
        f'  {env}pgrag query "What is this about?" --realm {realm} --space {shlex.quote(space)} --json',
        f"  {env}pgrag add MORE_DOCS --space {partition}     # another folder or file",
    ]


@app.command()
def init(
    folder: Annotated[
        Path, typer.Argument(help="the folder of documents (default: the working directory)")
    ] = Path("."),
    realm: Annotated[
        str | None, typer.Option("--realm", help="realm name (default: from the folder's name)")
    ] = None,
    space: Annotated[
        str | None, typer.Option("--space", help="space name (default: from the folder's name)")
    ] = None,
    glob: Annotated[
        str | None,
        typer.Option(
            "--glob",
            help="the documents' glob, e.g. '**/*.md' (default: one per kind of document the folder holds)",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing pgrag.yaml")] = False,
) -> None:
    """Write a commented pgrag.yaml for a folder of documents (one realm, one space; indexes offline as
    written, the switch to a live model is in its comments) and .gitignore lines for its data directory."""
    from pgrag_dag.operate.project import init_project

    try:
        w = init_project(folder, realm=realm, space=space, glob=glob, force=force)
    except PgragError as exc:
        fail(exc)
    lines = [*w.notes, f"wrote {w.config}: realm {w.realm}, space {w.space}", *_sources(w)]
    lines.append(
        f"appended .pgrag/ to {w.gitignore}" if w.gitignore else ".gitignore already leaves out .pgrag/"
    )
    lines += [
        "models: offline (extractor nlp, local embedder, llm replay); for a live model see the "
        "comments in the file (e.g. openai/gpt-4o-mini with OPENAI_API_KEY)"
    ]
    typer.echo("\n".join(lines + _next(w.config, w.realm, w.space)))


@app.command()
def add(
    path: Annotated[Path, typer.Argument(help="a folder or file of documents")],
    space: Annotated[str, typer.Option("--space", help="<realm>.<space> to add it to (created when new)")],
    glob: Annotated[
        str | None,
        typer.Option(
            "--glob", help="the documents' glob for a folder (default: one per kind of document it holds)"
        ),
    ] = None,
    key_prefix: Annotated[
        str | None,
        typer.Option(
            "--key-prefix",
            help="prepended to its documents' keys, to tell them from another source's (e.g. handbook/)",
        ),
    ] = None,
) -> None:
    """Register a source in the configuration (PGRAG_CONFIG or ./pgrag.yaml), keeping its comments."""
    from pgrag_dag.config.load import config_file
    from pgrag_dag.operate.project import add_source

    config = config_file()
    try:
        w = add_source(config, path, space, glob=glob, key_prefix=key_prefix)
    except PgragError as exc:
        fail(exc)
    typer.echo(
        "\n".join(
            [*w.notes, f"added to {w.realm}.{w.space} in {w.config}:", *_sources(w)]
            + _next(config if os.environ.get("PGRAG_CONFIG") else Path("pgrag.yaml"), w.realm, w.space)
        )
    )
