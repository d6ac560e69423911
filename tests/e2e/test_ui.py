"""The Dagster UI, checked in a real headless browser (issue 6 item 7).

Starts ``dg dev`` (what ``pgrag ui`` execs: it must start without a superseded-command warning) on loopback
with the small corpus's configuration, waits for the code location, adds a partition and launches a
materialisation of all eight assets over GraphQL, waits for success, then renders the asset graph and a
check's result in Debian's Chromium: screenshots are kept under ``test-artifacts/ui/`` and the rendered DOM is
asserted on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pgrag_dag.assets.runner import ui_argv
from tests.fix_browser import CHROMIUM, chromium_dom
from tests.fix_corpus import SmallCorpus
from tests.fix_daemon import REPO, ROOT, STAGES, free_port, gql, location_loaded, stop_group, wait_until

ARTIFACTS = ROOT / "test-artifacts" / "ui"

# end to end (``dg dev`` started, a run launched over GraphQL, four pages rendered: ~2 min): make test-slow
pytestmark = [
    pytest.mark.dagster,
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"),
]


def _chromium(url: str, *, screenshot: Path | None = None) -> str:
    profile = ARTIFACTS / ".profile"
    shutil.rmtree(profile, ignore_errors=True)
    dom = chromium_dom(url, profile, screenshot=screenshot, budget_ms=20000, window="1600,1000")
    shutil.rmtree(profile, ignore_errors=True)
    return dom


def test_the_ui_shows_the_materialised_assets_and_their_checks(
    small_corpus: SmallCorpus, realm: str, tmp_path: Path
) -> None:
    from tests.pipeline.test_operators import compose_space

    # a user's gate by import path: the UI must show it as a check of its stage, with its docstring
    compose_space(small_corpus, realm, gates=["tests.user_operators:full_names"])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    port = free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "PGRAG_CONFIG": str(small_corpus.config),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "PGRAG_DAGSTER__SENSORS": "false",
    }  # only the run this test launches (the daemon would start one too)
    log = (tmp_path / "dagster-dev.log").open("w")
    # the command `pgrag ui` execs (`dg dev`), which must start without a superseded-command warning
    argv = ui_argv(
        "127.0.0.1", port, workspace=str(ROOT / "workspace.yaml"), exe=str(Path(sys.executable).parent / "dg")
    )
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    key = f"{realm}.main"
    try:
        wait_until("the code location", lambda: location_loaded(port), 180)
        started = (tmp_path / "dagster-dev.log").read_text()
        assert not [line for line in started.splitlines() if "Warning" in line or "superseded" in line], (
            started
        )
        repo = REPO
        gql(
            port,
            """mutation($r: RepositorySelector!, $k: String!) { addDynamicPartition(repositorySelector: $r,
                     partitionsDefName: "space", partitionKey: $k) { __typename } }""",
            {"r": repo, "k": key},
        )
        launched = gql(
            port,
            """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
                                  __typename ... on LaunchRunSuccess { run { runId } }
                                  ... on PythonError { message } } }""",
            {
                "p": {
                    "selector": {
                        **repo,
                        "jobName": "__ASSET_JOB",
                        "assetSelection": [{"path": [s]} for s in STAGES],
                    },
                    "executionMetadata": {"tags": [{"key": "dagster/partition", "value": key}]},
                }
            },
        )
        assert launched["launchRun"]["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["launchRun"]["run"]["runId"]

        def finished() -> str | None:
            status = gql(
                port, "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }", {"id": run_id}
            )["runOrError"]["status"]
            return status if status in ("SUCCESS", "FAILURE", "CANCELED") else None

        assert wait_until("the run", finished, 300) == "SUCCESS", (tmp_path / "dagster-dev.log").read_text()[
            -3000:
        ]

        graph_dom = _chromium(
            f"http://127.0.0.1:{port}/asset-groups/index", screenshot=ARTIFACTS / "asset-graph.png"
        )
        assert all(stage in graph_dom for stage in STAGES)
        assets_dom = _chromium(f"http://127.0.0.1:{port}/assets")
        assert all(stage in assets_dom for stage in STAGES)
        check_url = f"http://127.0.0.1:{port}/assets/gated_triples?view=checks"
        check_dom = _chromium(check_url, screenshot=ARTIFACTS / "gated-triples-checks.png")
        assert "contract" in check_dom and "Pandera contract GateDecisionContract" in check_dom
        user_dom = _chromium(
            f"{check_url}&checkDetail=operator_full_names", screenshot=ARTIFACTS / "user-gate-check.png"
        )
        (ARTIFACTS / "user-gate-check.html").write_text(user_dom)
        assert "operator_full_names" in user_dom and "Refuses one-word entity names" in user_dom
        for shot in ("asset-graph.png", "gated-triples-checks.png", "user-gate-check.png"):
            assert (ARTIFACTS / shot).stat().st_size > 10_000  # a rendered page, not an empty frame
    finally:
        stop_group(proc)
        log.close()
