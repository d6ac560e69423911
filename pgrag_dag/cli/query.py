"""``pgrag query``: ask a space a question; passages, entities, relations and reports, or a synthesised
answer."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import logging
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from pgrag_dag.cli.common import app, fail, open_engine, query_target
from pgrag_dag.errors import PgragError
from pgrag_dag.query_param import (
    CHUNK_CHANNELS,
    MODES,
    PER_QUESTION,
    RELATION_CHANNELS,
    Fusion,
    KeywordMode,
    QueryParam,
    QueryResult,
    field_help,
    setting_fields,
)

if TYPE_CHECKING:  # the command imports the query path only when it runs
    from pgrag_dag.providers.embedding import Embedder


def query(
    question: str,
    realm: str | None = None,
    space: str | None = None,
    as_json: bool = False,
    stream: bool = False,
    **fields: Any,
) -> None:
    """Answer a question, then list its sources: each passage the context numbered, by its number, with
    doc_key, title, chunk index and an excerpt, marked "cited" when the answer cites it. With --json, print
    what was retrieved instead (no model call). Offline (``llm.models`` only ``replay``) a question never
    recorded has no model answer: one warning says so, then what retrieval found is printed instead —
    community reports, each passage's sentences closest to the question (best match first, by the
    embedder), and the ranked relations when no passage was found (global mode); exit 0. Warnings (e.g. a
    filter that matches nothing) go to stderr, once each. Options not given take the ``retrieval:`` defaults
    of pgrag.yaml, then the built-in ones (mode mix, top_k 10, 2 hops, ...); without --realm and --space it
    reads the first space the configuration declares."""
    from pgrag_dag.errors import ReplayMissError
    from pgrag_dag.providers.embedding import model_warning
    from pgrag_dag.providers.llm import REPLAY
    from pgrag_dag.query.citations import source_lines, sources
    from pgrag_dag.query.run import query_data, synthesise

    shown = _Shown()
    res = None
    # the query log's warnings are printed once, below, not logged too; the engine's close closes its pool
    try:
        with (
            _quiet("pgrag_dag.query", "pgrag_dag.query.keywords"),
            contextlib.closing(open_engine()) as engine,
        ):
            given = {
                name: (value or None) if isinstance(value, list) else value for name, value in fields.items()
            }
            realm, space = query_target(engine.settings, realm, space)
            # options not given keep the configured retrieval defaults (pgrag.yaml ``retrieval:``), then
            # QueryParam's
            param = QueryParam.from_settings(
                engine.settings.retrieval, space=space, **{k: v for k, v in given.items() if v is not None}
            )
            if as_json:
                res = query_data(
                    question,
                    param,
                    dsn=engine.dsn,
                    realm=realm,
                    embedder=engine.embedder(),
                    client=engine.client() if param.keywords == "model" else None,
                    telemetry=engine.settings.telemetry,
                )
                _warn(res.warnings)
                typer.echo(
                    json.dumps(
                        {
                            "keywords": res.keywords,
                            "entities": res.entities,
                            "relations": res.relations,
                            "chunks": res.chunks,
                            "communities": res.communities,
                            "warnings": res.warnings,
                            "channels": res.channels,
                            "assembly": res.assembly,
                        },
                        default=str,
                        indent=2,
                    )
                )
                return
            offline = set(engine.settings.llm.models) == {REPLAY}
            res = query_data(
                question,
                param,
                dsn=engine.dsn,
                realm=realm,
                embedder=engine.embedder(),
                client=engine.client(),
                telemetry=engine.settings.telemetry,
            )
            hashing = model_warning(
                engine.settings.embedding.model
            )  # answers from word hashing are weak: say so
            _warn(
                res.warnings + ([hashing] if hashing else [])
            )  # before the model is asked: a failed synthesis leaves them said
            try:
                answer = synthesise(
                    question, res, param, engine.client(), on_text=shown.append if stream else None
                )
            except ReplayMissError:
                # offline by configuration (llm.models: [replay]): what retrieval found is the answer we have
                if offline and _without_model(res, engine.embedder()):
                    return
                if offline and param.mode != "bypass":  # nothing retrieved, and no model to ask
                    typer.echo(
                        "nothing was retrieved for this question (see the warnings above, if any), and no "
                        "model writes answers offline (llm.models: [replay])",
                        err=True,
                    )
                    raise typer.Exit(1) from None
                raise
    except ReplayMissError as exc:  # a live model's replay miss, or offline with nothing retrieved to show
        typer.echo(
            f"error: {type(exc).__name__}: {exc} (`pgrag query --json` shows what retrieval found, with no "
            "model)",
            err=True,
        )
        raise typer.Exit(2) from None
    except PgragError as exc:
        if shown:
            typer.echo("")  # end a broken stream's line before the error
        fail(exc)
    if not stream:
        typer.echo(answer)
    elif not answer.endswith("\n"):
        typer.echo("")  # end the streamed answer's line
    lines = list(source_lines(sources(res, answer)))
    if lines:
        typer.echo("\n" + "\n".join(lines))


_ALSO = {
    "chunk_channels": "--chunk-channel",
    "relation_types": "--relation-type",
    "relation_channels": "--relation-channel",
    "node_distance_rerank": "--node-distance",
}
"""Option names ``pgrag query`` had before its options were derived from QueryParam, still accepted."""


def _field_option(name: str, kind: Any, text: str) -> inspect.Parameter:
    """The ``pgrag query`` option of QueryParam field ``name``: ``--<name>`` (and its earlier name), a
    repeatable option for a list, ``--<name>/--no-<name>`` for a flag; ``None`` when not given, so the
    ``retrieval:`` default and then QueryParam's own apply."""
    flag, also = "--" + name.replace("_", "-"), _ALSO.get(name)
    if kind is bool:
        decls = [f"{flag}/--no-{flag[2:]}"] + ([f"{also}/--no-{also[2:]}"] if also else [])
    else:
        decls = [flag] + ([also] if also else [])
    if kind == list[str]:
        text += " (repeatable)"
    choices = _CHOICES.get(name)
    text = text.replace("[", "\\[")  # Rich would take "[superseded]" for markup and drop it
    option = typer.Option(*decls, help=f"{choices}: {text}" if choices else text, show_default=False)
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[kind | None, option]
    )


_CHOICES = {
    "mode": " | ".join(MODES),
    "keywords": " | ".join(get_args(KeywordMode)),
    "fusion": " | ".join(get_args(Fusion)),
    "chunk_channels": " | ".join(CHUNK_CHANNELS),
    "relation_channels": " | ".join(RELATION_CHANNELS),
}


def _signature() -> inspect.Signature:
    """``query``'s parameters: the question, where to read, the output switches, then one option per
    QueryParam field (every field but ``space``, which ``--space`` names), in QueryParam's order."""
    fixed = [
        inspect.Parameter("question", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str),
        inspect.Parameter(
            "realm",
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=None,
            annotation=Annotated[
                str | None, typer.Option(help="realm to read (default: the first the configuration declares)")
            ],
        ),
        inspect.Parameter(
            "space",
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=None,
            annotation=Annotated[
                str | None,
                typer.Option(
                    help="space to read, or '*' for every space (read-only); default: "
                    "the realm's first declared space"
                ),
            ],
        ),
        inspect.Parameter(
            "as_json",
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=False,
            annotation=Annotated[
                bool, typer.Option("--json", help="print the retrieved data as JSON, no synthesis")
            ],
        ),
        inspect.Parameter(
            "stream",
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=False,
            annotation=Annotated[
                bool,
                typer.Option(
                    "--stream",
                    help="print the answer as the model writes it (a cached or replayed answer at once)",
                ),
            ],
        ),
    ]
    helps = field_help()
    derived = {name: kind for name, (kind, _) in setting_fields().items()}
    derived.update({name: str for name in PER_QUESTION if name != "space"})  # as_of, as_believed_at
    options = [
        _field_option(f.name, derived[f.name], helps.get(f.name, ""))
        for f in dataclasses.fields(QueryParam)
        if f.name in derived
    ]
    return inspect.Signature([*fixed, *options], return_annotation=None)


# Typer reads a command's parameters from its signature and annotations: both are QueryParam's fields
_QUERY_SIGNATURE = _signature()
query.__dict__["__signature__"] = _QUERY_SIGNATURE
query.__annotations__ = {p.name: p.annotation for p in _QUERY_SIGNATURE.parameters.values()} | {
    "return": None
}
app.command()(query)


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


def _without_model(res: QueryResult, embedder: Embedder) -> bool:
    """Print what retrieval found in place of a model answer, after one warning saying none is available
    (:func:`~pgrag_dag.query.extractive.report_lines`, then
    :func:`~pgrag_dag.query.extractive.extractive_lines` of
    :func:`~pgrag_dag.query.extractive.extractive_answer`, then the top
    :data:`~pgrag_dag.query.extractive.RELATIONS_SHOWN` relations); ``False``, printing nothing, when
    retrieval found nothing to show."""
    from pgrag_dag.query.extractive import (
        RELATIONS_SHOWN,
        extractive_answer,
        extractive_lines,
        relation_lines,
        report_lines,
    )

    reports = list(report_lines(res))
    found = list(extractive_lines(extractive_answer(res, embedder)))
    if not reports and not found:
        return False
    shown = ["community reports"] if res.communities else []
    facts: list[str] = []
    if found:
        shown.append("each passage's sentences closest to the question, best match first")
        if res.relations:
            n = min(RELATIONS_SHOWN, len(res.relations))
            facts = ["", f"Relations, best first ({n} of {len(res.relations)}; --json has all):"]
            facts += relation_lines(res, RELATIONS_SHOWN)
            shown.append("the top relations")
    elif res.relations:  # report_lines lists the relations only where no passage was found
        shown.append("the ranked relations")
    typer.echo(
        "warning: no model answer is available: no model writes answers offline (llm.models: [replay]) and "
        f"this question was never recorded; what retrieval found follows ({' and '.join(shown)}) — name a "
        "live model in llm.models for answers",
        err=True,
    )
    typer.echo("\n".join(reports + ([""] if reports and found else []) + found + facts))
    return True


def _warn(warnings: list[str]) -> None:
    """Each distinct warning once, as ``warning: ...`` on stderr."""
    for w in dict.fromkeys(warnings):
        typer.echo(f"warning: {w}", err=True)
