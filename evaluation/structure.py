"""Structural metrics of a corpus indexed under named arms: the paper's Table 6 (§8.6), Table 7 (§8.7), the
§8.8 density and labelling rows and §8.15's largest community (issue 17 item 2).

    python -m evaluation.structure                                   # Table 6 for the demo corpus, offline
    python -m evaluation.structure --arm 'floor 0.9={gates: {confidence_floor: 0.9}}' --arm 'as recorded={}'
    python -m evaluation.structure --extraction-model openai/gpt-4o-mini \\
        --arm 'no vocabulary={space: {preset: null}}'

Each **arm** (:class:`Arm`) is one configuration, given as a YAML fragment over a base space (default: the
demo's ``wiki.demo`` of ``pgrag.yaml``): top-level settings sections (``extraction``, ``gates``,
``communities``, ``llm``, ...) merged into the base settings, and ``space`` merged into the space's own fields
(``preset``, ``vocabulary``, ``predicate_aliases``, ``extractor``, ``reports``, ...). ``graph:`` is a second
fragment of the same shape applied from ``gated_triples`` on: the stored extractions are gated again
under it, so an arm can change what the gates and the graph do without changing a prompt. Every arm is a
space of its own in one fresh realm (:data:`REALM`), built by the eight stages of :mod:`pgrag_dag.pipeline`
with the model ``llm.models`` of the base (``replay`` for the demo, serving its cassettes) or
``--extraction-model`` (any litellm model name; it also writes the community reports).

**What replays** (the response cache is keyed by the prompt): an arm replays a recorded cassette only if it
sends the recorded prompts. The vocabulary is rendered into the extraction prompt's system message, so
vocabulary on/off needs a live model; gleaning 0 sends first-pass prompts only, but a document's chunks go in
rounds of ``extraction.batch_size`` and each prompt lists the names earlier rounds yielded (gleaned ones
included), so only each document's first round replays (24 of the demo's 58 chunks); gate
settings, snapping after extraction (``graph: {space: {preset: null}}``) and resolution change no extraction
prompt, but any change to the graph changes the community-report prompts (they list members and relations). A
report that is not recorded is skipped; the arm's partition is then rebuilt with extractive reports (no model)
so the largest-community share still covers the whole partition, and the rating spread counts the reports that
were model-written. An arm whose first extraction passes all missed is reported as needing a live model.

The metrics are :func:`evaluation.structure_metrics.graph_structure`'s, with the vocabulary share measured
against one reference vocabulary for every arm (the base space's; the biography preset's 35 terms for the
demo). Writes ``<name>.json`` / ``.md`` / ``.png`` under ``--out`` (default ``evaluation/results``) through
:mod:`evaluation.harness`.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation import plots
from evaluation.harness import ROOT, RunRecord, Table, progress, timed_run, write_run
from evaluation.structure_metrics import graph_structure

RESULTS = ROOT / "evaluation" / "results"
REALM = "eval_structure"
INDEX_STAGES = ("chunks", "raw_extractions", "gated_triples", "resolved_entities", "relations", "embeddings")


@dataclass
class Arm:
    """One configuration: ``settings`` (a YAML fragment: top-level settings sections and ``space``) for every
    stage, ``graph`` (the same shape) over it from ``gated_triples`` on, and what it needs (``note``)."""

    name: str
    settings: dict[str, Any] = field(default_factory=dict)
    graph: dict[str, Any] = field(default_factory=dict)
    note: str = ""


DEMO_ARMS = (
    Arm("as recorded", note="biography vocabulary (prompt and snapping), gleaning 1, default gates"),
    Arm(
        "no gleaning",
        {"extraction": {"gleaning_passes": 0}},
        note="first passes only; a document's chunks are extracted in rounds of extraction.batch_size (8), "
        "each prompt listing the names earlier rounds yielded, gleaned ones included: "
        "only first rounds replay",
    ),
    Arm(
        "no snapping",
        graph={"space": {"preset": None}},
        note="prompt with the vocabulary, predicates not snapped onto it",
    ),
    Arm("possessive gate", {"gates": {"possessive_gate": True}}, note="gate variation"),
    Arm("confidence ≥ 0.8", {"gates": {"confidence_floor": 0.8}}, note="gate variation"),
    Arm("no vocabulary", {"space": {"preset": None}}, note="the prompt changes: needs a live model"),
)
"""The demo's arms: four replay every recorded extraction prompt, ``no gleaning`` some, ``no vocabulary``
none."""


def parse_arm(text: str) -> Arm:
    """``NAME=YAML`` → :class:`Arm`; the YAML is a mapping whose ``graph`` key (optional) is the
    post-extraction fragment and whose ``note`` a free text. Raises :class:`ValueError` on anything else."""
    import yaml

    name, sep, body = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"an arm is NAME=YAML, got {text!r}")
    data = yaml.safe_load(body) or {}
    if not isinstance(data, dict):
        raise ValueError(f"arm {name!r}: the YAML must be a mapping, got {type(data).__name__}")
    graph, note = data.pop("graph", {}) or {}, str(data.pop("note", ""))
    return Arm(name.strip(), data, graph, note)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def arm_settings(
    config: Path,
    base: Any,
    spec: Any,
    space: str,
    fragments: Sequence[dict[str, Any]],
    *,
    dsn: str,
    extraction_model: str | None,
    embedding_model: str,
) -> Any:
    """The settings of one arm's space: ``base`` settings (read from ``config``) and space ``spec`` with each
    fragment merged in order, realm :data:`REALM` holding space ``space`` only. Raises
    :class:`~pgrag_dag.errors.ConfigurationError` for an invalid fragment."""
    from pgrag_dag.config import RealmSpec, SpaceSpec, load_settings

    over: dict[str, Any] = {}
    space_fields = spec.model_dump()
    for fragment in fragments:
        for key, value in fragment.items():
            if key == "space":
                space_fields = _merge(space_fields, value)
            else:
                current = over.get(key, getattr(base, key))
                current = current.model_dump() if hasattr(current, "model_dump") else current
                over[key] = (
                    _merge(current, value) if isinstance(value, dict) and isinstance(current, dict) else value
                )
    if extraction_model:
        over["llm"] = _merge(over.get("llm", base.llm.model_dump()), {"models": [extraction_model]})
    over.setdefault(
        "embedding",
        {"model": embedding_model, "dim": 384} if embedding_model else base.embedding.model_dump(),
    )
    realms = {REALM: RealmSpec(spaces={space: SpaceSpec.model_validate(space_fields)})}
    cassettes = [p if p.is_absolute() else (config.parent / p).resolve() for p in base.cassettes]
    return load_settings(
        config, database_url=dsn, config_dir=base.config_dir, realms=realms, cassettes=cassettes, **over
    )


def source_chars(settings: Any, realm: str, space: str) -> int:
    """Characters of the space's source files as read (UTF-8 text; a JSONL file counts whole)."""
    from pgrag_dag.ingest.listing import list_source_files

    return sum(
        len(p.read_text(encoding="utf-8-sig", errors="replace"))
        for p in list_source_files(settings, settings.space_spec(realm, space))
    )


def build_arm(make: Any, arm: Arm, space: str) -> dict[str, Any]:
    """Index one arm (``make(fragments)`` → an Engine) through the eight stages; returns ``status`` and the
    stages' metadata. A replay miss on every first pass stops the arm (``status: needs a live model``)."""
    from pgrag_dag.errors import ExtractionError, ModelError
    from pgrag_dag.pipeline import (
        stage_chunks,
        stage_embeddings,
        stage_gated_triples,
        stage_raw_extractions,
        stage_relations,
        stage_resolved_entities,
    )
    from pgrag_dag.pipeline.community_stages import stage_communities, stage_community_hierarchy

    first, after = make([arm.settings]), make([arm.settings, arm.graph])
    meta: dict[str, Any] = {}
    out: dict[str, Any] = {"status": "built", "meta": meta, "engines": [first, after]}
    try:
        for stage, engine in (
            (stage_chunks, first),
            (stage_raw_extractions, first),
            (stage_gated_triples, after),
            (stage_resolved_entities, after),
            (stage_relations, after),
            (stage_embeddings, after),
        ):
            meta[stage.__name__.removeprefix("stage_")] = stage(engine, REALM, space).metadata
    except ExtractionError as exc:
        out["status"] = "needs a live model" if "never recorded" in str(exc) else f"extraction failed: {exc}"
        out["error"] = str(exc)[:300]
        return out
    try:
        meta["communities"] = stage_communities(after, REALM, space).metadata
    except ModelError as exc:  # no report replayed
        meta["communities"] = {"communities": 0, "reports_failed": None, "error": str(exc)[:300]}
    model_written = meta["communities"].get("communities", 0)
    out["ratings_from"] = model_written
    if meta["communities"].get("reports_failed") or "error" in meta["communities"]:
        out["report_ratings"] = _ratings(after, space)
        extractive = make([arm.settings, arm.graph, {"space": {"reports": "extractive"}}])
        out["engines"].append(extractive)
        meta["communities_extractive"] = stage_communities(extractive, REALM, space).metadata
        out["reports"] = (
            f"{model_written} of {meta['communities_extractive']['communities']} reports replayed; "
            "partition rebuilt with extractive reports"
        )
    meta["community_hierarchy"] = stage_community_hierarchy(out["engines"][-1], REALM, space).metadata
    return out


def _ratings(engine: Any, space: str) -> list[float]:
    from pgrag_dag.store import export

    with engine.connect() as conn:
        reports = export.export_communities(conn, REALM, space)
    return sorted(set(reports.filter(reports["level"] == 0)["rating"].to_list()))


def measure(engine: Any, space: str, vocabulary: Any, chars: int, built: dict[str, Any]) -> dict[str, Any]:
    """:func:`graph_structure` of the arm's space plus its run: chunks indexed, model calls, replayed
    responses."""
    from pgrag_dag.store import db

    meta = built["meta"]
    with db.connect(engine.dsn) as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        m = graph_structure(conn, REALM, space, vocabulary, chars=chars)
    raw = meta["raw_extractions"]
    m["chunks"] = meta["chunks"]["chunks"]
    m["chunks_indexed"] = meta["chunks"]["chunks"] - raw["chunks_failed"]
    m["gleaning_failures"] = raw["gleaning_failures"]
    if "report_ratings" in built:  # the model-written reports, before the extractive rebuild
        m["report_ratings"], m["rating_spread"] = (
            built["report_ratings"],
            _spread(built["report_ratings"], built),
        )
    return m


def _spread(ratings: list[float], built: dict[str, Any]) -> str:
    from evaluation.structure_metrics import rating_spread

    return (
        f"{rating_spread(ratings)} over {built['reports']}"
        if ratings
        else f"no report replayed ({built['reports']})"
    )


ROWS_6 = (
    ("Chunks indexed", lambda m: f"{m['chunks_indexed']}/{m['chunks']}"),
    ("Entities", "entities"),
    ("Relations", "relations"),
    ("Distinct predicates", "distinct_predicates"),
    ("Relations on a vocabulary predicate", lambda m: _pct(m["vocabulary_predicate_share"])),
    ("Orphan entities (no relations)", "orphan_entities"),
    ("Duplicate edge rows", "duplicate_edge_rows"),
    ("Fragmented short-form vertices (declared aliases)", "fragmented_short_form_vertices"),
    ("Fragmented short-form vertices (graph)", "fragmented_graph_vertices"),
    ("Pronoun entities", "pronoun_entities"),
)
ROWS_7 = (
    ("Entities carrying aliases", "entities_with_aliases"),
    ("Negated relations captured", "negated_relations"),
    (
        "Corroborated (weight > 1)",
        lambda m: f"{m['corroborated_relations']} ({_pct(m['corroborated_share'])})",
    ),
    ("Single-use predicates", lambda m: _pct(m["single_use_predicate_share"])),
    ("Commonest predicates", lambda m: ", ".join(m["top_predicates"])),
    ("Level-0 communities", "communities"),
    ("Largest community share", lambda m: _pct(m["largest_community_share"])),
    ("Community rating spread", "rating_spread"),
)
ROWS_88 = (
    ("Source characters", lambda m: f"{m['chars']:,}"),
    ("Entities per 10k characters", lambda m: f"{m['entities_per_10k_chars']:.1f}"),
    ("Relations per 10k characters", lambda m: f"{m['relations_per_10k_chars']:.1f}"),
    ("Distinct edge labels ÷ relations", lambda m: _pct(m["labels_per_relation"])),
)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.0f}%"


def tables(arms: Sequence[Arm], results: dict[str, Any], vocabulary_note: str) -> list[Table]:
    """Table 6, Table 7 and the §8.8 rows, one column per arm (an arm that could not be built shows its
    status)."""

    def table(title: str, rows: Any, note: str = "") -> Table:
        body = []
        for label, get in rows:
            cells = []
            for arm in arms:
                m = results[arm.name].get("metrics")
                cells.append(
                    results[arm.name]["status"] if m is None else (get(m) if callable(get) else m[get])
                )
            body.append([label, *cells])
        return Table(title, ["", *[a.name for a in arms]], body, note=note)

    status = Table(
        "Arms",
        ["arm", "configuration", "status", "model calls", "replayed responses", "note"],
        [
            [
                a.name,
                _describe(a),
                results[a.name]["status"],
                results[a.name].get("model_calls"),
                results[a.name].get("cache_hits"),
                a.note,
            ]
            for a in arms
        ],
    )
    return [
        status,
        table(
            "Table 6: effect of each mechanism",
            ROWS_6,
            f"Vocabulary share against {vocabulary_note} for every arm. Fragmented (declared aliases): named "
            "by a form another vertex declares as an alias (the graph_quality check); (graph): a one-word "
            "vertex equal to the first or last word of exactly one longer Person vertex mentioned "
            "in a shared document.",
        ),
        table(
            "Table 7: extraction-model and report measures",
            ROWS_7,
            "Largest community share: the largest level-0 community's members ÷ live entities (§8.15).",
        ),
        table("§8.8: density and edge labelling", ROWS_88),
    ]


def _describe(arm: Arm) -> str:
    import json

    parts = [json.dumps(arm.settings, ensure_ascii=False)] if arm.settings else []
    if arm.graph:
        parts.append("after extraction: " + json.dumps(arm.graph, ensure_ascii=False))
    return "; ".join(parts) or "base configuration"


def plot(arms: Sequence[Arm], results: dict[str, Any], path: Path) -> Path | None:
    """Two panels (counts; shares) of grouped bars per built arm, PNG at ``path``; ``None`` without
    matplotlib."""
    import numpy as np

    plt = plots.pyplot()
    if plt is None:
        return None
    built = [a for a in arms if results[a.name].get("metrics")]
    panels = (
        (
            ("entities", "entities"),
            ("relations", "relations"),
            ("distinct_predicates", "distinct predicates"),
            ("orphan_entities", "orphans"),
            ("entities_with_aliases", "with aliases"),
        ),
        (
            ("vocabulary_predicate_share", "on vocabulary"),
            ("single_use_predicate_share", "single-use predicates"),
            ("corroborated_share", "weight > 1"),
            ("largest_community_share", "largest community"),
        ),
    )
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for ax, metrics in zip(axes, panels):
        x = np.arange(len(metrics))
        width = 0.8 / max(len(built), 1)
        for i, arm in enumerate(built):
            m = results[arm.name]["metrics"]
            ax.bar(
                x + (i - (len(built) - 1) / 2) * width, [m[k] or 0 for k, _ in metrics], width, label=arm.name
            )
        ax.set_xticks(x, [label for _, label in metrics], fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_title("counts")
    axes[1].set_title("shares")
    axes[1].set_ylim(0, 1)
    axes[0].legend(fontsize=8)
    return plots.save(fig, path, title="Structure of the graph per arm (Table 6, Table 7, §8.15)")


def run(
    arms: Sequence[Arm],
    *,
    dsn: str,
    out_dir: Path,
    config: Path = ROOT / "pgrag.yaml",
    space: str = "wiki.demo",
    source_root: Path | None = None,
    extraction_model: str | None = None,
    embedding_model: str = "hashing-sha256",
    name: str = "structure_demo",
) -> RunRecord:
    """Build every arm of the base space ``space`` (``realm.space`` of ``config``; its sources read under
    ``source_root`` instead of the configuration's folder when given) in a fresh realm :data:`REALM` of
    ``dsn``, measure each and write the run under ``out_dir``; returns the record. The embedder (default
    hashing: no structural metric reads a vector) is the realm's."""
    from evaluation.bench_index import fresh_realm
    from pgrag_dag.config import load_settings
    from pgrag_dag.engine import Engine

    base_realm, _, base_space = space.partition(".")
    base = load_settings(config, database_url=dsn, **({"config_dir": source_root} if source_root else {}))
    spec = base.space_spec(base_realm, base_space)
    reference = spec.vocabulary_model()
    vocabulary_note = (
        f"the {spec.preset} vocabulary ({len(reference.terms)} terms)"
        if spec.preset
        else f"the base space's vocabulary ({len(reference.terms)} terms)"
    )
    record = RunRecord(
        name,
        config={
            "base": {"config": str(config), "space": space, "source_root": str(source_root or "")},
            "arms": {a.name: {"settings": a.settings, "graph": a.graph, "note": a.note} for a in arms},
            "reference_vocabulary": list(reference.terms),
            "realm": REALM,
        },
        models={"extraction": extraction_model or base.llm.models, "embedding": embedding_model},
    )
    results: dict[str, Any] = {}
    with timed_run(record):
        fresh_realm(dsn, REALM)
        engines: list[Any] = []
        try:
            for i, arm in enumerate(progress(arms, f"{len(arms)} arms")):
                arm_space = f"arm{i + 1}_" + re.sub(r"[^a-z0-9]+", "_", arm.name.lower()).strip("_")

                def make(fragments: Sequence[dict[str, Any]], arm_space: str = arm_space) -> Any:
                    engine = Engine.from_settings(
                        arm_settings(
                            config,
                            base,
                            spec,
                            arm_space,
                            fragments,
                            dsn=dsn,
                            extraction_model=extraction_model,
                            embedding_model=embedding_model,
                        )
                    )
                    engines.append(engine)
                    return engine

                if i == 0:
                    make([]).import_cassettes()
                built = build_arm(make, arm, arm_space)
                usage = [e.usage() for e in built["engines"]]
                res = results[arm.name] = {
                    "space": arm_space,
                    "status": built["status"],
                    "stages": built["meta"],
                    "model_calls": sum(u["model_calls"] for u in usage),
                    "cache_hits": sum(u["cache_hits"] for u in usage),
                }
                if "error" in built:
                    res["error"] = built["error"]
                if built["status"] == "built":
                    first = built["engines"][0]
                    chars = source_chars(first.settings, REALM, arm_space)
                    res["metrics"] = measure(first, arm_space, reference, chars, built)
        finally:
            for engine in engines:
                engine.close()
        record.results = {"arms": results}
        record.tables = tables(arms, results, vocabulary_note)
        chart = plot(arms, results, out_dir / f"{name}.png")
        record.plots = [chart] if chart else []
    write_run(record, out_dir)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    from evaluation.bench_index import Database

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--arm",
        action="append",
        default=[],
        metavar="NAME=YAML",
        help="an arm (repeatable); default the demo's arms (DEMO_ARMS)",
    )
    ap.add_argument(
        "--config", type=Path, default=ROOT / "pgrag.yaml", help="the base configuration (default pgrag.yaml)"
    )
    ap.add_argument("--space", default="wiki.demo", help="the base realm.space (default wiki.demo)")
    ap.add_argument(
        "--extraction-model",
        help="a litellm model name for extraction and reports (default: the base's "
        "llm.models, replay for the demo)",
    )
    ap.add_argument(
        "--embedding-model", default="hashing-sha256", help="the realm's embedder (default hashing-sha256)"
    )
    ap.add_argument("--name", default="structure_demo", help="the run's name (file stem)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="directory for the JSON, Markdown and PNG")
    ap.add_argument(
        "--data-dir",
        type=Path,
        help="embedded PostgreSQL data dir (kept); default a temporary one; PGRAG_DATABASE_URL wins",
    )
    args = ap.parse_args(argv)
    arms = [parse_arm(a) for a in args.arm] or list(DEMO_ARMS)
    database = Database(args.data_dir)
    try:
        record = run(
            arms,
            dsn=database.dsn,
            out_dir=args.out,
            config=args.config,
            space=args.space,
            extraction_model=args.extraction_model,
            embedding_model=args.embedding_model,
            name=args.name,
        )
    finally:
        database.close()
    print(record.markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
