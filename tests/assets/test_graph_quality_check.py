"""The ``graph_quality`` check's warnings (issue 31 item 1): a measure that is a property of the extractor is
a yellow warning with its value and fix in a real Dagster run, which goes on to the last asset, and a
``warning`` line of ``pgrag index``, whose checks stay green."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml
from typer.testing import CliRunner

from pgrag_dag.assets.changes import COMMUNITY_CHECKS
from pgrag_dag.assets.partitions import add_partitions
from pgrag_dag.assets.stages import ASSETS
from pgrag_dag.cli import app
from pgrag_dag.graph.quality import ORPHAN_FIX
from pgrag_dag.resources.engine import PgragResource

pytestmark = pytest.mark.dagster

LONELY = (
    "Ada Lovelace wrote to Charles Babbage.\n\n"
    "Later that year, the letters went north. Mary Somerville wrote books. Afterwards came a lecture. "
    "Michael Faraday lectured well. Nobody answered. John Herschel looked at the stars.\n"
)
"""Two names share a sentence; the others stand alone in theirs: most entities are orphans."""


def _lonely_space(tmp_path: Path, pg_dsn: str, realm: str) -> Path:
    """A project of one space ``main`` holding :data:`LONELY`, extracted by ``cooccurrence``; its file."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "letters.txt").write_text(LONELY, encoding="utf-8")
    config = tmp_path / "pgrag.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "database_url": pg_dsn,
                "data_dir": str(tmp_path / "data"),
                "llm": {"models": ["replay"]},
                "realms": {
                    realm: {
                        "spaces": {
                            "main": {
                                "extractor": "cooccurrence",
                                "sources": [{"path": "docs", "glob": "*.txt"}],
                            }
                        }
                    }
                },
            }
        ),
        encoding="utf-8",
    )
    return config


def test_an_orphan_share_above_the_extractors_ceiling_warns_and_blocks_nothing(
    tmp_path: Path, pg_dsn: str, realm: str
) -> None:
    config = _lonely_space(tmp_path, pg_dsn, realm)
    key = f"{realm}.main"
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        result = dg.materialize(
            [*ASSETS, *COMMUNITY_CHECKS],
            partition_key=key,
            instance=instance,
            resources={"pgrag": PgragResource(config_path=str(config))},
            raise_on_error=False,
        )
        assert result.success
        materialised = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
        assert {"relations", "embeddings", "communities", "community_hierarchy"} <= materialised
        quality = next(e for e in result.get_asset_check_evaluations() if e.check_name == "graph_quality")
    assert not quality.passed and quality.severity == dg.AssetCheckSeverity.WARN
    meta = {k: getattr(v, "value", v) for k, v in quality.metadata.items()}
    entities, orphans = meta["entities"], meta["orphan_entities"]
    assert orphans / entities > 0.5 and meta["blocking"] == [] and meta["extractor"] == "cooccurrence"
    assert meta["warnings"] == [
        f"orphan_entities {orphans} of {entities} ({orphans / entities:.0%}, above 50% for the cooccurrence "
        "extractor): no relation names them, so only their own chunks find them; to relate more, "
        f"{ORPHAN_FIX['cooccurrence']}"
    ]
    assert quality.description == f"{key}: warning: {meta['warnings'][0]}"


def test_pgrag_index_says_the_warning_with_its_fix_and_stays_green(
    tmp_path: Path, pg_dsn: str, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_CONFIG", str(_lonely_space(tmp_path, pg_dsn, realm)))
    out = CliRunner().invoke(app, ["index", f"{realm}.main"])
    assert out.exit_code == 0, out.output
    said = [line for line in out.output.splitlines() if "orphan_entities" in line]
    assert len(said) == 2, out.output  # once on stderr as it happens, once in the summary
    assert said[0].startswith("warning: relations:graph_quality: orphan_entities ")
    assert said[1].startswith("    warning: orphan_entities ")
    assert all(ORPHAN_FIX["cooccurrence"] in line for line in said)
    assert "(all green)" in out.stdout
