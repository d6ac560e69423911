"""The demo's graph on the test database: ``pgrag.yaml``'s ``wiki.demo`` space (the bundled Wikipedia
articles, the shipped cassettes replayed, no model call) under a test realm."""

from __future__ import annotations

from pathlib import Path

from pgrag_dag.config import RealmSpec, load_settings
from pgrag_dag.engine import Engine
from pgrag_dag.pipeline import (
    stage_chunks,
    stage_communities,
    stage_community_hierarchy,
    stage_gated_triples,
    stage_raw_extractions,
    stage_relations,
    stage_resolved_entities,
)

ROOT = Path(__file__).resolve().parents[1]
GRAPH_STAGES = (
    stage_chunks,
    stage_raw_extractions,
    stage_gated_triples,
    stage_resolved_entities,
    stage_relations,
    stage_communities,
    stage_community_hierarchy,
)
"""Every stage but the embeddings: the graph and its communities, for tests that read no vector."""


def demo_engine(pg_dsn: str, realm: str, root: Path = ROOT) -> Engine:
    """The demo's settings (``pgrag.yaml``) on the test database, with the corpus under ``root``, its
    space ``demo`` in ``realm``; the Wikipedia and the Disney 10-K cassettes imported (149 + 31 responses)."""
    demo = load_settings(ROOT / "pgrag.yaml").space_spec("wiki", "demo")
    settings = load_settings(
        ROOT / "pgrag.yaml",
        database_url=pg_dsn,
        config_dir=root,
        realms={realm: RealmSpec(spaces={"demo": demo})},
    )
    engine = Engine.from_settings(settings)
    assert engine.import_cassettes() == 149 + 31
    return engine


def build_graph(engine: Engine, realm: str, space: str = "demo") -> None:
    """Index ``space`` (by default the demo's) up to its communities and their hierarchy
    (:data:`GRAPH_STAGES`)."""
    for stage in GRAPH_STAGES:
        stage(engine, realm, space)
