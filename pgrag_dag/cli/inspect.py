"""``pgrag status``, ``pgrag list entities|relations|communities|documents`` and ``pgrag lineage``: what the
store holds, read only (issue 16 item 5). Human output by default, ``--json`` for machines; errors are one
line (exit 2) as for every command."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import typer

from pgrag_dag.cli.common import (
    AsJson,
    OptionalPartition,
    app,
    fail,
    open_engine,
    query_target,
    resolve_partition,
)
from pgrag_dag.errors import PgragError
from pgrag_dag.operate.summary import counted

list_app = typer.Typer(
    no_args_is_help=True,
    help="List what a space holds, a page at a time (--limit, --offset), most mentioned, heaviest or "
    "largest first (--sort for other orders); --json for machines.",
)
app.add_typer(list_app, name="list")

Limit = Annotated[int, typer.Option(min=1, help="rows per page")]
Offset = Annotated[int, typer.Option(min=0, help="rows to skip")]
Name = Annotated[str | None, typer.Option("--name", help="case-insensitive substring to match")]
EntitySort = Annotated[
    Literal["mentions", "name", "id"],
    typer.Option("--sort", help="mentions: most mentioned first; name; id: oldest first"),
]
RelationSort = Annotated[
    Literal["weight", "chunks", "name", "id"],
    typer.Option(
        "--sort",
        help="weight: heaviest first; chunks: most stated first; name: subject, predicate, object; id",
    ),
]
CommunitySort = Annotated[
    Literal["size", "level", "rating", "id"],
    typer.Option("--sort", help="size: largest first; level: by level, then size; rating: best first; id"),
]


@app.command()
def status(as_json: AsJson = False) -> None:
    """Realms (embedding model), spaces (documents, chunks, entities, relations, communities and whether they
    are stale, each stage's last run) and the LLM response cache. Reads only: creates nothing, and on a new
    data directory says nothing is indexed yet and what to run next."""
    from pgrag_dag.config.load import load_settings
    from pgrag_dag.operate.status import store_status, summary_lines

    try:
        result = store_status(load_settings(required=True))
    except PgragError as exc:
        fail(exc)
    typer.echo(json.dumps(result, default=str, indent=2) if as_json else "\n".join(summary_lines(result)))


def _show(kind: str, partition: str, page: Any, as_json: bool, line: Any) -> None:
    """Print one page: JSON (``kind, realm, space, total, offset, limit, items``) or a header
    ``<kind> of <partition>: 1–50 of 312`` and one line per row."""
    realm, space = partition.split(".", 1)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "kind": kind,
                    "realm": realm,
                    "space": space,
                    "total": page.total,
                    "offset": page.offset,
                    "limit": page.limit,
                    "items": page.rows,
                },
                default=str,
                indent=2,
            )
        )
        return
    if not page.rows:
        typer.echo(
            f"{kind} of {partition}: none of {page.total}"
            + (f" past offset {page.offset}" if page.total else "")
        )
        return
    typer.echo(f"{kind} of {partition}: {page.offset + 1}–{page.offset + len(page.rows)} of {page.total}")
    for row in page.rows:
        typer.echo(line(row))


def _listing(
    kind: str, partition: str | None, as_json: bool, read: Any, line: Any, note: Any = None, **filters: Any
) -> None:
    """Read one page with ``read(conn, realm, space, **filters)`` and :func:`_show` it; ``note(conn, realm,
    space, page)``, when given, returns a line said on stderr after the page (or ``None``)."""
    from pgrag_dag.store import db

    said = None
    try:
        with _engine_closing() as engine:
            realm, space = resolve_partition(engine, partition)
            with db.database_errors(engine.dsn), db.read_connection(engine.dsn) as conn, conn.transaction():
                _require_space(conn, engine.settings, realm, space)
                page = read(conn, realm, space, **filters)
                said = note(conn, realm, space, page) if note is not None else None
    except PgragError as exc:
        fail(exc)
    _show(kind, f"{realm}.{space}", page, as_json, line)
    if said:
        typer.echo(said, err=True)


def _require_realm(conn: Any, realm: str, then: str) -> None:
    """Raise :class:`QueryError` (one line, naming the command to run) when ``realm`` has no schema yet."""
    from pgrag_dag.errors import QueryError
    from pgrag_dag.store.history import table_exists

    if not table_exists(conn, realm, "documents"):
        raise QueryError(f"realm {realm!r} has not been indexed yet; run {then}")


def _require_space(conn: Any, settings: Any, realm: str, space: str) -> None:
    """Raise :class:`QueryError` (one line) unless ``realm.space`` holds something: naming the command that
    indexes it when the configuration declares it, else the spaces it declares."""
    from pgrag_dag.errors import QueryError
    from pgrag_dag.store.inventory import realm_spaces

    if space in realm_spaces(conn, realm):
        return
    declared = [f"{r}.{s}" for r, spec in settings.realms.items() for s in spec.spaces]
    if f"{realm}.{space}" in declared:
        raise QueryError(f"space {realm}.{space} has not been indexed yet; run pgrag index {realm}.{space}")
    raise QueryError(
        f"space {realm}.{space} is neither indexed nor in the configuration (declared: "
        f"{', '.join(declared) or 'none'})"
    )


def _engine_closing():
    import contextlib

    return contextlib.closing(open_engine())


def _flags(row: dict[str, Any], *names: str) -> str:
    marks = [n for n in names if row.get(n)]
    return f" [{', '.join(marks)}]" if marks else ""


@list_app.command("entities")
def list_entities(
    partition: OptionalPartition = None,
    name: Name = None,
    entity_type: Annotated[str | None, typer.Option("--type", help="entity type (any case)")] = None,
    include_dormant: Annotated[
        bool, typer.Option("--include-dormant", help="also dormant and archived entities")
    ] = False,
    sort: EntitySort = "mentions",
    limit: Limit = 50,
    offset: Offset = 0,
    as_json: AsJson = False,
) -> None:
    """Entities, most mentioned first (--sort name for A–Z): id, name, type, chunks mentioning it; --name
    matches names and aliases."""
    from pgrag_dag.store.inventory import list_entities as read

    _listing(
        "entities",
        partition,
        as_json,
        read,
        lambda e: (
            f"{e['id']:>7}  {e['name']} ({e['entity_type']}), {counted(e['mentions'], 'mention')}"
            + _flags(e, "dormant", "archived")
        ),
        note=(lambda conn, realm, space, page: _type_note(conn, realm, space, entity_type, page))
        if entity_type
        else None,
        name=name,
        entity_type=entity_type,
        include_dormant=include_dormant,
        sort=sort,
        limit=limit,
        offset=offset,
    )


def _type_note(conn: Any, realm: str, space: str, entity_type: str, page: Any) -> str | None:
    """When ``--type`` matched nothing: the types the space's live entities have, with counts (the offline
    extractors type many entities ``Concept``)."""
    from pgrag_dag.store.inventory import entity_types

    if page.total:
        return None
    types = entity_types(conn, realm, space)
    listed = ", ".join(f"{t} ({n:,})" for t, n in types.items()) or "none: the space has no live entity"
    return f"no entity of type {entity_type!r}; the types of {realm}.{space}: {listed}"


@list_app.command("relations")
def list_relations(
    partition: OptionalPartition = None,
    name: Name = None,
    predicate: Annotated[str | None, typer.Option("--predicate", help="predicate (any case)")] = None,
    include_superseded: Annotated[
        bool, typer.Option("--include-superseded", help="also superseded relations")
    ] = False,
    include_dormant: Annotated[
        bool, typer.Option("--include-dormant", help="also dormant relations")
    ] = False,
    sort: RelationSort = "weight",
    limit: Limit = 50,
    offset: Offset = 0,
    as_json: AsJson = False,
) -> None:
    """Relations, heaviest first (--sort name for subject, predicate, object): the edge, its validity, its
    weight, how many chunks state it; --name matches the subject or the object."""
    from pgrag_dag.query.assembly import render_relation
    from pgrag_dag.store.inventory import list_relations as read

    _listing(
        "relations",
        partition,
        as_json,
        read,
        lambda r: (
            f"{r['id']:>7}  {render_relation({**r, 'description': None})}, weight {r['weight']:g}, "
            f"{counted(r['chunks'], 'chunk')}" + _flags(r, "dormant")
        ),
        name=name,
        predicate=predicate,
        include_superseded=include_superseded,
        include_dormant=include_dormant,
        sort=sort,
        limit=limit,
        offset=offset,
    )


@list_app.command("communities")
def list_communities(
    partition: OptionalPartition = None,
    name: Name = None,
    level: Annotated[int | None, typer.Option("--level", min=0, help="this level only")] = None,
    sort: CommunitySort = "size",
    limit: Limit = 50,
    offset: Offset = 0,
    as_json: AsJson = False,
) -> None:
    """Community reports, largest first (--sort level for level by level): id, level, title, members,
    rating; --name matches the title."""
    from pgrag_dag.store.inventory import list_communities as read

    _listing(
        "communities",
        partition,
        as_json,
        read,
        lambda c: (
            f"{c['id']:>7}  level {c['level']}  {c['title']} "
            f"({counted(c['size'], 'member')}, rating {c['rating']:g})"
        ),
        name=name,
        level=level,
        sort=sort,
        limit=limit,
        offset=offset,
    )


@list_app.command("documents")
def list_documents(
    partition: OptionalPartition = None,
    name: Name = None,
    limit: Limit = 50,
    offset: Offset = 0,
    as_json: AsJson = False,
) -> None:
    """Documents in document order: doc_key, title, chunks, characters; --name matches the doc_key or
    title."""
    from pgrag_dag.store.inventory import list_documents as read

    _listing(
        "documents",
        partition,
        as_json,
        read,
        lambda d: (
            f"{d['position']:>7}  {d['doc_key']}"
            + (f" · {d['title']}" if d["title"] != d["doc_key"] else "")
            + f", {counted(d['chunks'], 'chunk')}, {counted(d['chars'], 'character')}"
        ),
        name=name,
        limit=limit,
        offset=offset,
    )


@app.command()
def top(
    partition: Annotated[
        str | None,
        typer.Argument(
            help="<realm>.<space>, as in pgrag.yaml (default: the only space the configuration declares)"
        ),
    ] = None,
    n: Annotated[int, typer.Option("-n", "--top", min=1, help="rows of each list")] = 10,
    as_json: AsJson = False,
) -> None:
    """A space at a glance: its most mentioned entities, heaviest relations and largest communities. The
    first page of each `pgrag list` in its default order, where junk names show first."""
    from pgrag_dag.query.assembly import render_relation
    from pgrag_dag.store import db, inventory

    try:
        with _engine_closing() as engine:
            realm, space = resolve_partition(engine, partition)
            with db.database_errors(engine.dsn), db.read_connection(engine.dsn) as conn, conn.transaction():
                _require_space(conn, engine.settings, realm, space)
                pages = {
                    "entities": inventory.list_entities(conn, realm, space, limit=n),
                    "relations": inventory.list_relations(conn, realm, space, limit=n),
                    "communities": inventory.list_communities(conn, realm, space, limit=n),
                }
    except PgragError as exc:
        fail(exc)
    if as_json:
        out = {k: {"total": p.total, "items": p.rows} for k, p in pages.items()}
        typer.echo(json.dumps({"realm": realm, "space": space, **out}, default=str, indent=2))
        return
    e, r, c = pages["entities"], pages["relations"], pages["communities"]
    lines = [f"{realm}.{space} at a glance (`pgrag list entities|relations|communities` for the rest):"]
    lines.append(f"entities, most mentioned ({len(e.rows)} of {e.total:,}):")
    lines += [f"  {x['mentions']:>7,}  {x['name']} ({x['entity_type']})" for x in e.rows]
    lines.append(f"relations, heaviest ({len(r.rows)} of {r.total:,}):")
    lines += [
        f"  {x['weight']:>7g}  {render_relation({**x, 'description': None})}, {counted(x['chunks'], 'chunk')}"
        for x in r.rows
    ]
    lines.append(f"communities, largest ({len(c.rows)} of {c.total:,}):")
    lines += [
        f"  {x['size']:>7,}  {x['title']} (id {x['id']}, level {x['level']}, rating {x['rating']:g})"
        for x in c.rows
    ]
    typer.echo("\n".join(lines))


@app.command()
def lineage(
    community_id: int,
    realm: Annotated[
        str | None,
        typer.Option(help="realm of the community (default: the first the configuration declares)"),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="items shown per level of the tree")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="print the whole lineage as JSON")] = False,
) -> None:
    """What a community report derives from, as a tree — community → entities → relations → chunks →
    documents, with counts, each level cut at --limit ("… and N more"); --json prints all of it."""
    from pgrag_dag.store import db
    from pgrag_dag.store.lineage import lineage as community_lineage

    try:
        engine = open_engine()
        if realm is None:
            realm = query_target(engine.settings, None, None)[0]
        with db.database_errors(engine.dsn), engine.connect() as conn:
            _require_realm(conn, realm, "pgrag index REALM.SPACE (its communities stage builds the reports)")
            found = community_lineage(conn, realm, community_id)
    except PgragError as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps(found, default=str, indent=2))
        return
    from rich.console import Console

    console = Console(soft_wrap=True, highlight=False)
    if not console.is_terminal:  # a file or a pipe: whole lines, not cut at 80 columns
        console.width = 1000
    console.print(lineage_tree(found, limit=limit))


def lineage_tree(found: dict[str, Any], *, limit: int = 10) -> Any:
    """A :class:`rich.tree.Tree` of a :func:`pgrag_dag.store.lineage.lineage` result: the community, then one
    branch per level (entities, relations, chunks, documents) headed by its count, at most ``limit`` items
    each, then ``… and N more``."""
    from rich.markup import escape
    from rich.tree import Tree

    from pgrag_dag.query.assembly import render_relation

    c = found["community"]
    tree = Tree(escape(f"community {c['id']} (level {c['level']}, space {c['space']}): {c['title']}"))
    items = {
        "entities": [e["name"] for e in found["entities"]],
        "relations": [
            f"{render_relation({**r, 'description': None})}  (chunks {', '.join(map(str, r['chunk_ids']))})"
            for r in found["relations"]
        ],
        "chunks": [f"{ch['doc_key']} chunk {ch['chunk_index']} (id {ch['id']})" for ch in found["chunks"]],
        "documents": [
            f"{d['doc_key']}"
            + (f" · {d['title']}" if d["title"] != d["doc_key"] else "")
            + f" ({counted(len(d['chunks']), 'chunk')})"
            for d in found["documents"]
        ],
    }
    for level, texts in items.items():
        branch = tree.add(f"{level} ({len(texts)})")
        for text in texts[:limit]:
            branch.add(escape(text))
        if len(texts) > limit:
            branch.add(f"… and {len(texts) - limit} more")
    return tree


__all__ = ["lineage", "lineage_tree", "list_app", "status", "top"]
