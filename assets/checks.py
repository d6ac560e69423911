"""Turning a stage's contract outcome and measurements into Dagster asset-check results.

Every result is about one partition: the checks are partitioned like their assets (Dagster records the
result's partition), and each result's metadata also names it (``partition``), so the check history in the
UI says which realm/space a result is about."""

from __future__ import annotations

from typing import Any

import dagster as dg
import polars as pl

from pgrag_dag.errors import ContractError

CHECK_NAME = "contract"


def _md_table(frame: pl.DataFrame) -> str:
    cols = frame.columns
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.iter_rows():
        lines.append(
            "| " + " | ".join(str(v).replace("|", "\\|").replace("\n", " ")[:200] for v in row) + " |"
        )
    return "\n".join(lines)


def passed(asset: str, partition: str, rows_checked: int, contract: str) -> dg.AssetCheckResult:
    """The check result of a frame of ``partition`` that met its contract."""
    return dg.AssetCheckResult(
        check_name=CHECK_NAME,
        asset_key=asset,
        passed=True,
        description=f"{partition}: {rows_checked} row(s) met {contract}",
        metadata={"partition": partition, "rows_checked": rows_checked, "contract": contract},
    )


def failed(
    asset: str, partition: str, exc: ContractError, *, max_rows: int = 50, check: str = CHECK_NAME
) -> dg.AssetCheckResult:
    """The check result of a broken contract in ``partition``, with the offending rows as a table and
    markdown."""
    cases: Any = exc.failure_cases
    meta: dict[str, Any] = {"partition": partition, "contract": exc.contract}
    if isinstance(cases, pl.DataFrame):
        fc = cases.head(max_rows).with_columns(pl.all().cast(pl.String))
        meta["num_failures"] = cases.height
        meta["failure_cases"] = dg.MetadataValue.md(_md_table(fc))
        meta["failure_cases_table"] = dg.MetadataValue.table(
            records=[dg.TableRecord(r) for r in fc.to_dicts()],
            schema=dg.TableSchema(columns=[dg.TableColumn(c, "string") for c in fc.columns]),
        )
    return dg.AssetCheckResult(
        check_name=check,
        asset_key=asset,
        passed=False,
        severity=dg.AssetCheckSeverity.ERROR,
        description=f"{partition}: {exc}",
        metadata=meta,
    )


def measured(
    asset: str,
    partition: str,
    check: str,
    ok: bool,
    metrics: dict[str, Any],
    *,
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR,
    description: str | None = None,
) -> dg.AssetCheckResult:
    """A measurement check of ``partition`` (e.g. ``graph_quality``, ``pending_work``): the metrics as
    metadata, with ``severity`` when not ok; ``description`` replaces "<partition>: <check> passed|failed"."""
    meta: dict[str, Any] = {"partition": partition}
    meta.update(
        {
            k: dg.MetadataValue.json(v) if isinstance(v, (list, dict)) or v is None else v
            for k, v in metrics.items()
        }
    )
    return dg.AssetCheckResult(
        check_name=check,
        asset_key=asset,
        passed=ok,
        metadata=meta,
        severity=severity,
        description=description or f"{partition}: {check} {'passed' if ok else 'failed'}",
    )


def graded(asset: str, partition: str, check: str, ok: bool, metrics: dict[str, Any]) -> dg.AssetCheckResult:
    """A measurement check whose metrics carry ``blocking`` and ``warnings`` lines
    (:func:`pgrag_dag.graph.quality.judge_quality`): failed with severity ERROR when ``ok`` is false (a
    blocking check then stops the downstream assets), failed with severity WARN when only warnings apply (the
    run goes on, the UI shows the check yellow), else passed; the description says the lines."""
    warn_only = ok and bool(metrics.get("warnings"))
    lines = [*(metrics.get("blocking") or []), *(f"warning: {w}" for w in metrics.get("warnings") or [])]
    return measured(
        asset,
        partition,
        check,
        ok and not warn_only,
        metrics,
        severity=dg.AssetCheckSeverity.WARN if warn_only else dg.AssetCheckSeverity.ERROR,
        description=f"{partition}: " + "; ".join(lines) if lines else None,
    )
