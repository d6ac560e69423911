"""``pgrag query``: ask a space a question; passages, entities, relations and reports, or a synthesised
answer."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from typing import Annotated

import typer

from pgrag_dag.cli.common import app, fail, open_engine, query_target
from pgrag_dag.errors import PgragError


@app.command()
def query(
    question: str,
    realm: Annotated[
        str | None, typer.Option(help="realm to read (default: the first the configuration declares)")
    ] = None,
    space: Annotated[
        str | None,
        typer.Option(
            help="space to read, or '*' for every space (read-only); default: "
            "the realm's first declared space"
        ),
    ] = None,
    mode: Annotated[str | None, typer.Option(help="mix | local | global | hybrid | naive | bypass")] = None,
    top_k: Annotated[int | None, typer.Option(help="entities matched")] = None,
    chunk_top_k: Annotated[int | None, typer.Option(help="passages by chunk search")] = None,
    chunk_channel: Annotated[
        list[str] | None,
        typer.Option(help="chunk search channel: vector | fulltext (repeatable; two are fused by RRF)"),
    ] = None,
    max_hops: Annotated[int | None, typer.Option(help="traversal depth")] = None,
    max_relation_edges: Annotated[
        int | None, typer.Option(help="relations one matched entity may contribute")
    ] = None,
    relation_type: Annotated[
        list[str] | None, typer.Option(help="restrict relations to this predicate (repeatable)")
    ] = None,
    fusion: Annotated[str | None, typer.Option(help="rrf | quota")] = None,
    keywords: Annotated[str | None, typer.Option(help="model | lexical | off")] = None,
    mmr: Annotated[
        bool | None, typer.Option("--mmr/--no-mmr", help="maximal marginal relevance over relations")
    ] = None,
    node_distance: Annotated[
        bool | None,
        typer.Option("--node-distance/--no-node-distance", help="rerank relations by graph distance"),
    ] = None,
    max_passage_tokens: Annotated[
        int | None, typer.Option(help="cap on the passages block (tokens = chars/4)")
    ] = None,
    as_of: Annotated[
        str | None,
        typer.Option(help="valid-time date YYYY, YYYY-MM or YYYY-MM-DD; undated relations always match"),
    ] = None,
    as_believed_at: Annotated[
        str | None,
        typer.Option(help="belief-time ISO-8601 instant (naive = UTC): the graph as believed then"),
    ] = None,
    include_superseded: Annotated[
        bool | None,
        typer.Option(
            "--include-superseded/--no-include-superseded", help="also return superseded relations, marked"
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the retrieved data as JSON, no synthesis")
    ] = False,
    stream: Annotated[
        bool,
        typer.Option(
            "--stream", help="print the answer as the model writes it (a cached or replayed answer at once)"
        ),
    ] = False,
) -> None:
    """Answer a question, then list its sources: each passage the context numbered, by its number, with
    doc_key, title, chunk index and an excerpt, marked "cited" when the answer cites it. With --json, print
    what was retrieved instead (no model call). Offline (``llm.models`` only ``replay``) a question never
    recorded prints its sources alone, with a warning. Warnings (e.g. a filter that matches nothing) go to
    stderr, once each. Options not given take the
    ``retrieval:`` defaults of pgrag.yaml, then the built-in ones (mode mix, top_k 10, 2 hops, ...); without
    --realm and --space it reads the first space the configuration declares."""
    from pgrag_dag.errors import ReplayMissError
    from pgrag_dag.providers.embedding import model_warning
    from pgrag_dag.providers.llm import REPLAY
    from pgrag_dag.query.citations import source_lines, sources
    from pgrag_dag.query.param import QueryParam
    from pgrag_dag.query.run import query_data, synthesise

    shown = _Shown()
    res = None
    offline = False
    # the query log's warnings are printed once, below, not logged too; the engine's close closes its pool
    try:
        with (
            _quiet("pgrag_dag.query", "pgrag_dag.query.keywords"),
            contextlib.closing(open_engine()) as engine,
        ):
            given = {
                "mode": mode,
                "top_k": top_k,
                "chunk_top_k": chunk_top_k,
                "chunk_channels": chunk_channel or None,
                "max_hops": max_hops,
                "max_relation_edges": max_relation_edges,
                "relation_types": relation_type or None,
                "fusion": fusion,
                "keywords": keywords,
                "mmr": mmr,
                "node_distance_rerank": node_distance,
                "max_passage_tokens": max_passage_tokens,
                "as_of": as_of,
                "as_believed_at": as_believed_at,
                "include_superseded": include_superseded,
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
            answer = synthesise(
                question, res, param, engine.client(), on_text=shown.append if stream else None
            )
    except ReplayMissError as exc:
        lines = list(source_lines(sources(res))) if res is not None and offline else []
        if (
            lines
        ):  # offline by configuration (llm.models: [replay]): what retrieval found is the answer we have
            typer.echo(
                "warning: no model writes answers offline (llm.models: [replay]) and this question was never "
                "recorded: the passages retrieval found follow; name a live model in llm.models for answers",
                err=True,
            )
            typer.echo("\n".join(lines))
            return
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
