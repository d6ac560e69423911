"""The graph's files in Dagster (issue 16 items 7–8): the optional asset ``graph_export`` (settings
``export.asset``, off by default) writing the space's graph under ``<data_dir>/exports/<partition>/`` in
``export.formats``, and the browser view written beside every ``communities`` materialisation
(``export.view``, on by default) and linked from its metadata. Thin: the engine's
:mod:`pgrag_dag.graph.export` and :mod:`pgrag_dag.graph.view` do the work."""

import hashlib
from typing import Any

import dagster as dg

from pgrag_dag.assets.automation import ON_UPSTREAM_CHANGE
from pgrag_dag.assets.partitions import SPACES
from pgrag_dag.config.sections import Settings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import PgragError
from pgrag_dag.names import split_partition_key
from pgrag_dag.resources.engine import PgragResource

EXPORT_ASSET = "graph_export"


def view_metadata(engine: Engine, realm: str, space: str, log: Any) -> dict[str, Any]:
    """Write the space's graph view (:func:`pgrag_dag.graph.view.write_view`) and return the metadata that
    links it: ``graph_view`` (its path) and ``graph_view_url`` (``file://``), with what it draws. A view that
    cannot be written (a read-only data dir, …) is logged as a warning and said in ``graph_view``: the
    materialisation goes on. Nothing when ``export.view`` is off."""
    if not engine.settings.export.view:
        return {}
    from pgrag_dag.graph.view import write_view

    try:
        view = write_view(engine, realm, space)
    except (PgragError, OSError) as exc:
        log.warning(f"graph view of {realm}.{space} not written: {type(exc).__name__}: {exc}")
        return {"graph_view": f"not written: {type(exc).__name__}: {exc}"}
    return {
        "graph_view": dg.MetadataValue.path(str(view.path)),
        "graph_view_url": dg.MetadataValue.url(view.path.as_uri()),
        "graph_view_drawn": view.summary(),
    }


def build_graph_export(settings: Settings) -> dg.AssetsDefinition:
    """The ``graph_export`` asset, partitioned per space, downstream of ``communities`` and
    ``community_hierarchy``: :func:`pgrag_dag.graph.export.export_graph` in ``export.formats``. Its metadata
    names every file written (``file:<format>:<table>``, ``file:graphml``) and the rows of each table; its
    data version is the SHA-256 of the files (the same graph writes the same bytes)."""
    formats = list(settings.export.formats)

    @dg.asset(
        name=EXPORT_ASSET,
        partitions_def=SPACES,
        deps=["communities", "community_hierarchy"],
        group_name="export",
        kinds={"postgres", "polars"},
        automation_condition=ON_UPSTREAM_CHANGE,
        description=f"The space's entities, relations, communities and mentions as files under "
        f"<data_dir>/exports/<partition>/ ({', '.join(formats)}) for Gephi, NetworkX and notebooks.",
    )
    def graph_export(context: dg.AssetExecutionContext, pgrag: PgragResource) -> dg.MaterializeResult:
        from pgrag_dag.graph.export import export_graph

        realm, space = split_partition_key(context.partition_key)
        try:
            result = export_graph(pgrag.engine(), realm, space, formats=formats)
        except PgragError as exc:
            raise dg.Failure(
                description=f"{EXPORT_ASSET} {context.partition_key}: {type(exc).__name__}: {exc}",
                metadata={"error": type(exc).__name__},
            ) from exc
        digest = hashlib.sha256()
        for key, path in sorted(result.files.items()):
            digest.update(key.encode() + b"\0" + path.read_bytes())
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": result.rows["entities"] + result.rows["relations"],
                "row_count_of": "entities + relations exported (dormant, archived and superseded included)",
                "directory": dg.MetadataValue.path(str(result.directory)),
                **{f"file:{k}": dg.MetadataValue.path(str(p)) for k, p in result.files.items()},
                **{f"rows:{t}": n for t, n in result.rows.items()},
            },
            data_version=dg.DataVersion(digest.hexdigest()[:16]),
        )

    return graph_export
