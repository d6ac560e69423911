"""``pgrag cypher``: a read-only openCypher query over one space (or every space of a realm), printed as a
table, JSON or CSV; ``--explain`` prints the compiled SQL and its parameters instead (issue 29).
Registered on :data:`pgrag_dag.cli.app` by importing this module."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pgrag_dag.cli.common import app, fail, query_target
from pgrag_dag.errors import ConfigurationError, PgragError

if TYPE_CHECKING:  # polars is imported when the command runs
    import polars as pl


def _params(pairs: list[str]) -> dict[str, Any]:
    """``k=v`` pairs → parameters: ``v`` read as JSON when it is JSON (``3``, ``true``, ``null``,
    ``["a", "b"]``, ``"quoted"``), else as the text itself."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(f"--param takes name=value, got {pair!r}")
        try:
            out[key.strip()] = json.loads(raw)
        except ValueError:
            out[key.strip()] = raw
    return out


def _scope(space: str | None) -> tuple[str | None, str | None]:
    """``--space realm.space`` (``realm.*``: every space of the realm) → ``(realm, space)``."""
    if space is None:
        return None, None
    realm, sep, name = space.partition(".")
    if not sep or not realm or not name:
        raise ConfigurationError(
            f"--space takes <realm>.<space> (or <realm>.* for every space), got {space!r}"
        )
    return realm, name


def _csv(frame: pl.DataFrame) -> str:
    """CSV of ``frame``; a node, relationship or list cell as its JSON."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(frame.columns)
    for row in frame.iter_rows():
        writer.writerow([json.dumps(v, default=str) if isinstance(v, dict | list) else v for v in row])
    return buffer.getvalue()


def _table(frame: pl.DataFrame) -> str:
    import polars as pl

    with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=80, tbl_hide_dataframe_shape=True):
        return f"{frame}\n({frame.height} row{'s' if frame.height != 1 else ''})"


def cypher(
    query: Annotated[str, typer.Argument(help="the Cypher query: MATCH … [OPTIONAL MATCH …] RETURN …")],
    space: Annotated[
        str | None,
        typer.Option(
            help="<realm>.<space> (<realm>.* reads every space of the realm); default: the first declared"
        ),
    ] = None,
    param: Annotated[
        list[str] | None, typer.Option("--param", help="name=value for $name (value read as JSON when it is)")
    ] = None,
    as_of: Annotated[str | None, typer.Option(help="valid time: YYYY, YYYY-MM or YYYY-MM-DD")] = None,
    as_believed_at: Annotated[
        str | None, typer.Option(help="belief time: the graph as the system believed it at this ISO instant")
    ] = None,
    include_superseded: Annotated[bool, typer.Option(help="also traverse superseded relations")] = False,
    max_rows: Annotated[
        int | None, typer.Option(min=1, help="refuse a longer result (add LIMIT); default: cypher.max_rows")
    ] = None,
    max_hops: Annotated[
        int | None,
        typer.Option(min=0, help="the longest variable-length relationship, *1..N; default: cypher.max_hops"),
    ] = None,
    timeout_s: Annotated[
        float | None,
        typer.Option(min=0.001, help="the read's statement timeout, s; default: cypher.timeout_s"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the rows as JSON objects")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="print the rows as CSV")] = False,
    explain: Annotated[
        bool, typer.Option("--explain", help="print the compiled SQL and its parameters; run nothing")
    ] = False,
) -> None:
    """Run a read-only openCypher query: nodes are entities (a label is the entity type; properties
    name, type, description, aliases, space), relationships are relations (a type is the predicate;
    properties predicate, description, weight, negated, confidence, valid_from, valid_to, t_created,
    t_expired, superseded_by, superseded, space). Writing clauses (CREATE, MERGE, SET, DELETE, …) are
    refused with their position. The query sees what retrieval sees: the space, live rows, and --as-of /
    --as-believed-at / --include-superseded inside every hop. The limits default to the configuration's
    cypher: section. Example: pgrag cypher "MATCH (p:Person)-\\[r]->(o) RETURN p.name, type(r), o.name
    LIMIT 5" --space wiki.demo"""
    from pgrag_dag.config.load import load_settings
    from pgrag_dag.cypher import CypherOptions, answer
    from pgrag_dag.cypher import explain as explain_sql
    from pgrag_dag.engine import Engine
    from pgrag_dag.temporal import Temporal, belief_instant

    if as_json and as_csv:
        fail(ConfigurationError("pass --json or --csv, not both"))
    try:
        realm, name = _scope(space)
        believed = None if as_believed_at is None else belief_instant(as_believed_at)
        temporal = Temporal(as_of=as_of, believed_at=believed, include_superseded=include_superseded)
        settings = load_settings(required=not explain)  # --explain compiles without a database
        bounds = {"max_hops": max_hops, "max_rows": max_rows, "timeout_s": timeout_s}

        def options(realm: str, space: str) -> CypherOptions:
            return CypherOptions.bounded(realm, space, temporal, settings.cypher, **bounds)

        values = _params(param or [])
        if realm is not None and name is not None:  # refused, or explained, before a database is opened
            text, bound = explain_sql(query, values, options(realm, name))
            if explain:
                typer.echo(text + "\n" + json.dumps(bound, default=str, indent=2))
                return
        with contextlib.closing(Engine.from_settings(settings)) as engine:
            realm, name = query_target(engine.settings, realm, name)
            if explain:
                text, bound = explain_sql(query, values, options(realm, name))
                typer.echo(text + "\n" + json.dumps(bound, default=str, indent=2))
                return
            frame = answer(query, values, options(realm, name), dsn=engine.dsn)
    except PgragError as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps(frame.to_dicts(), default=str, indent=2))
    elif as_csv:
        typer.echo(_csv(frame), nl=False)
    else:
        typer.echo(_table(frame))


app.command()(cypher)
