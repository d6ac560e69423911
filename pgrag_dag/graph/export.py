"""Graph export (issue 16 item 7): one space's entities, relations, communities and mentions as GraphML
(written by igraph) or as one Parquet or CSV file per table (written by polars), for Gephi, NetworkX,
igraph and notebooks. ``pgrag export`` and the optional Dagster asset ``graph_export`` call
:func:`export_graph`.

What the space holds now is exported — live entities (archived ones are dormant), live relations superseded
or not, every community level — each row with its state (the columns of :mod:`pgrag_dag.store.export`), so a
reader filters as it likes (the current graph: relations with ``superseded`` false). Dormant rows — what a
removed document alone supported, kept as history — are left out unless ``include_dormant`` (``pgrag export
--include-dormant``) adds them, marked ``dormant`` (issue 28: an export is handed on; history stays in the
database). The four tables are read in one repeatable-read snapshot.

Files, under the target directory:

- ``graph.graphml``: entities as vertices, relations as directed edges (subject → object), with every
  column as an attribute. GraphML attributes are scalars, so lists are JSON text (``aliases``, ``chunk_ids``,
  ``community_ids``, ``doc_keys``), timestamps ISO-8601 text, a missing text ``""`` and a missing number
  absent (NaN when read). Vertices also carry ``label`` (= ``name``, what Gephi shows), ``community`` (the
  level-0 community id), ``community_ids`` (every level's), ``doc_keys`` and ``mentions`` (count); edges
  ``label`` (= ``predicate``). Graph attributes: ``realm``, ``space``.
- ``entities|relations|communities|mentions.parquet``: the frames as read, lists and timestamps native.
- ``entities|relations|communities|mentions.csv``: the same; list columns as JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl

from pgrag_dag.config.sections import Settings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ExportError, UnknownSpaceError
from pgrag_dag.names import partition_key, validate_realm, validate_space

Format = Literal["graphml", "parquet", "csv"]
FORMATS: tuple[Format, ...] = ("graphml", "parquet", "csv")
TABLES = ("entities", "relations", "communities", "mentions")
GRAPHML_FILE = "graph.graphml"


@dataclass(frozen=True)
class GraphTables:
    """One space's graph as frames (schemas in :mod:`pgrag_dag.store.export`): ``entities``, ``relations``,
    ``communities``, ``mentions``."""

    realm: str
    space: str
    entities: pl.DataFrame
    relations: pl.DataFrame
    communities: pl.DataFrame
    mentions: pl.DataFrame

    def table(self, name: str) -> pl.DataFrame:
        """The frame called ``name`` (one of :data:`TABLES`)."""
        return getattr(self, name)

    def rows(self) -> dict[str, int]:
        """Rows per table."""
        return {t: self.table(t).height for t in TABLES}


@dataclass
class ExportResult:
    """What :func:`export_graph` wrote: the ``directory``, ``files`` (``"graphml"`` or ``"<format>:<table>"``
    → path) and the ``rows`` of each table."""

    directory: Path
    files: dict[str, Path] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: directory, files (paths as text), rows."""
        return {
            "directory": str(self.directory),
            "files": {k: str(v) for k, v in self.files.items()},
            "rows": self.rows,
        }


def read_tables(engine: Engine, realm: str, space: str, *, mentions: bool = True) -> GraphTables:
    """Read the space's four tables in one read-only repeatable-read snapshot (``mentions=False`` leaves
    that frame empty, for readers that do not need it).

    Raises :class:`InvalidNameError` for a bad realm or space, :class:`UnknownSpaceError` when the realm or
    the space holds nothing (never indexed, mistyped or deleted), :class:`DatabaseError` when PostgreSQL
    fails.
    """
    from psycopg import IsolationLevel

    from pgrag_dag.store import db
    from pgrag_dag.store import export as store
    from pgrag_dag.store.retrieval import realm_embedding, space_exists, unindexed_space

    validate_realm(realm)
    validate_space(space)
    with db.database_errors(engine.dsn), engine.connect() as conn:
        conn.read_only = True
        conn.isolation_level = IsolationLevel.REPEATABLE_READ
        with conn.transaction():
            if realm_embedding(conn, realm) is None:
                raise UnknownSpaceError(f"realm {realm!r} does not exist (it has never been indexed)")
            if not space_exists(conn, realm, space):
                raise UnknownSpaceError(unindexed_space(realm, space))
            return GraphTables(
                realm,
                space,
                store.export_entities(conn, realm, space),
                store.export_relations(conn, realm, space),
                store.export_communities(conn, realm, space),
                store.export_mentions(conn, realm, space)
                if mentions
                else pl.DataFrame(schema=store.MENTION_SCHEMA),
            )


def export_dir(settings: Settings, realm: str, space: str) -> Path:
    """``<data_dir>/exports/<partition key>/`` — the key percent-encodes a space's blanks and slashes."""
    return settings.resolve(settings.data_dir) / "exports" / partition_key(realm, space)


def check_target(out: str | Path | None) -> Path | None:
    """``out`` (a path or its text) made absolute, or ``None``; raises :class:`ExportError` when its parent
    directory is missing (a typo must not create a tree of directories)."""
    if out is None:
        return None
    path = Path(out).expanduser().absolute()
    if not path.parent.is_dir():
        raise ExportError(f"cannot write to {path}: its parent directory {path.parent} does not exist")
    return path


def target_dir(out: str | Path | None, default: Path) -> Path:
    """The directory to write into: ``out`` (created when missing; its parent must exist) or ``default``
    (created with its parents). Raises :class:`ExportError` naming the path when it cannot be made."""
    checked = check_target(out)
    path = default if checked is None else checked
    if path.exists() and not path.is_dir():
        raise ExportError(f"cannot write to {path}: it is a file, not a directory")
    try:
        path.mkdir(parents=out is None, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create {path}: {exc.strerror or exc}") from None
    return path


def _json_lists(frame: pl.DataFrame) -> pl.DataFrame:
    """List columns as JSON text (CSV and GraphML hold scalars only)."""
    lists = [c for c, t in frame.schema.items() if isinstance(t, pl.List)]
    return frame.with_columns(
        pl.Series(
            c,
            [None if v is None else json.dumps(v, ensure_ascii=False) for v in frame[c].to_list()],
            dtype=pl.String,
        )
        for c in lists
    )


def _scalar_column(series: pl.Series) -> list[Any]:
    """One GraphML attribute column: text with ``""`` for null, numbers as float with NaN for null (so an
    all-null column stays numeric), booleans as they are, timestamps as ISO-8601 text, lists as JSON text."""
    dtype = series.dtype
    if isinstance(dtype, pl.List):
        return [json.dumps(v if v is not None else [], ensure_ascii=False) for v in series.to_list()]
    if isinstance(dtype, pl.Datetime):
        return ["" if v is None else v.isoformat() for v in series.to_list()]
    if dtype == pl.Boolean:
        return [bool(v) for v in series.to_list()]
    if dtype.is_numeric():
        return [float("nan") if v is None else float(v) for v in series.to_list()]
    return ["" if v is None else str(v) for v in series.to_list()]


def _vertex_extras(tables: GraphTables) -> pl.DataFrame:
    """Per entity id: ``community`` (its level-0 community), ``community_ids`` (every level's, by id),
    ``doc_keys`` (documents mentioning it, sorted) and ``mentions`` (chunks mentioning it)."""
    ids = tables.entities.select(pl.col("id").alias("entity_id"))
    members = tables.communities.select(
        "id", "level", pl.col("member_entity_ids").alias("entity_id")
    ).explode("entity_id")
    comm = (
        members.drop_nulls("entity_id")
        .group_by("entity_id")
        .agg(
            pl.col("id").filter(pl.col("level") == 0).min().alias("community"),
            pl.col("id").sort().alias("community_ids"),
        )
    )
    ment = tables.mentions.group_by("entity_id").agg(
        pl.col("doc_key").unique().sort().alias("doc_keys"), pl.len().cast(pl.Int64).alias("mentions")
    )
    return (
        ids.join(comm, on="entity_id", how="left")
        .join(ment, on="entity_id", how="left")
        .with_columns(
            pl.col("community_ids").fill_null(pl.lit([], dtype=pl.List(pl.Int64))),
            pl.col("doc_keys").fill_null(pl.lit([], dtype=pl.List(pl.String))),
            pl.col("mentions").fill_null(0),
        )
    )


def to_igraph(tables: GraphTables) -> Any:
    """The space as a directed ``igraph.Graph``: one vertex per entity (in id order; attribute ``entity_id``),
    one edge per relation (attribute ``relation_id``), attributes as the module docstring says."""
    import igraph as ig

    ents = tables.entities
    index = {int(i): n for n, i in enumerate(ents["id"].to_list())}
    rels = tables.relations
    graph = ig.Graph(
        n=ents.height,
        directed=True,
        edges=[(index[int(s)], index[int(t)]) for s, t in rels.select("source_id", "target_id").iter_rows()],
    )
    graph["realm"], graph["space"] = tables.realm, tables.space
    vertices = ents.rename({"id": "entity_id"}).join(
        _vertex_extras(tables), on="entity_id", how="left", maintain_order="left"
    )
    for column in vertices.columns:
        graph.vs[column] = _scalar_column(vertices[column])
    graph.vs["label"] = graph.vs["name"]
    for column in rels.rename({"id": "relation_id"}).columns:
        graph.es[column] = _scalar_column(rels.rename({"id": "relation_id"})[column])
    graph.es["label"] = graph.es["predicate"] if rels.height else []
    return graph


def write_graphml(tables: GraphTables, path: Path) -> Path:
    """Write :func:`to_igraph`'s graph to ``path`` as GraphML (igraph's writer); returns ``path``."""
    to_igraph(tables).write_graphml(str(path))
    return path


def write_tables(tables: GraphTables, directory: Path, fmt: Literal["parquet", "csv"]) -> dict[str, Path]:
    """One ``<table>.<fmt>`` file per table under ``directory`` (polars' writers; CSV lists as JSON text);
    ``"<fmt>:<table>"`` → path."""
    out = {}
    for name in TABLES:
        path = directory / f"{name}.{fmt}"
        frame = tables.table(name)
        if fmt == "parquet":
            frame.write_parquet(path)
        else:
            _json_lists(frame).write_csv(path)
        out[f"{fmt}:{name}"] = path
    return out


def check_formats(formats: Iterable[str]) -> list[Format]:
    """``formats`` without repeats, in order; raises :class:`ExportError` for an unknown one or none."""
    wanted: list[Format] = []
    for f in formats:
        if f not in FORMATS:
            raise ExportError(f"unknown export format {f!r}: expected {', '.join(FORMATS)}")
        if f not in wanted:
            wanted.append(f)
    if not wanted:
        raise ExportError(f"no export format given: expected one or more of {', '.join(FORMATS)}")
    return wanted


def write_export(tables: GraphTables, directory: Path, formats: Sequence[str]) -> ExportResult:
    """Write ``tables`` in each of ``formats`` into the existing ``directory``. Raises :class:`ExportError`
    for an unknown format or a file that cannot be written."""
    result = ExportResult(directory, rows=tables.rows())
    for fmt in check_formats(formats):
        try:
            if fmt == "graphml":
                result.files["graphml"] = write_graphml(tables, directory / GRAPHML_FILE)
            else:
                result.files.update(write_tables(tables, directory, fmt))
        except OSError as exc:
            raise ExportError(
                f"cannot write the {fmt} export into {directory}: {exc.strerror or exc}"
            ) from None
    return result


def live_only(tables: GraphTables) -> GraphTables:
    """``tables`` without dormant rows: entities not dormant (nor archived), relations not dormant between
    two of them, their mentions, and community member lists naming only them."""
    entities = tables.entities.filter(~pl.col("dormant"))
    ids = entities["id"].implode()
    relations = tables.relations.filter(
        ~pl.col("dormant") & pl.col("source_id").is_in(ids) & pl.col("target_id").is_in(ids)
    )
    communities = tables.communities.with_columns(
        pl.col("member_entity_ids").list.set_intersection(ids.first()).list.sort()
    )
    mentions = tables.mentions.filter(pl.col("entity_id").is_in(ids))
    return GraphTables(tables.realm, tables.space, entities, relations, communities, mentions)


def export_graph(
    engine: Engine,
    realm: str,
    space: str,
    *,
    formats: Sequence[str] = ("graphml", "parquet"),
    out: str | Path | None = None,
    include_dormant: bool = False,
) -> ExportResult:
    """Export one space (:func:`read_tables`; without dormant rows — :func:`live_only` — unless
    ``include_dormant``) in ``formats`` into ``out`` or :func:`export_dir`.

    Raises :class:`ExportError` (unknown format; ``out``'s parent missing; not writable),
    :class:`UnknownSpaceError`, :class:`InvalidNameError`, :class:`DatabaseError`.
    """
    check_formats(formats)
    default = export_dir(engine.settings, realm, space)
    check_target(out)  # a bad --out fails before the read
    tables = read_tables(engine, realm, space)
    return write_export(tables if include_dormant else live_only(tables), target_dir(out, default), formats)
