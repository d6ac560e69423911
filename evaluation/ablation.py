"""Paired ablation on a fixed graph, the re-indexing noise floor and the reader sweep (§8.4 Table 5, §8.14
Table 15, §8.12 Table 12; issue 17 items 4 and 6).

    python -m evaluation.ablation ablate --benchmark longmemeval --data longmemeval_s.json \\
        --extraction-model gemini/gemini-2.5-flash --reader gemini/gemini-2.5-flash \\
        --reader openai/gpt-4o-mini --judge openai/gpt-4o --judge anthropic/claude-3-5-haiku-latest \\
        --flag render_relation_validity
    python -m evaluation.ablation noise  …same models…     # index twice into two realms, compare
    python -m evaluation.ablation sweep  …, N readers…     # N readers over one fixed graph

- ``ablate``: index every item's space once into one realm, then answer every question under two arms that
  differ by one setting — ``--flag F``, a boolean :class:`~pgrag_dag.query_param.QueryParam` field (``off``:
  F false, ``on``: F true; e.g. ``render_relation_validity``, ``mmr``, ``node_distance_rerank``,
  ``decompose``), or ``--flag caps`` (``off``: no context caps, the default; ``on``: the pre-§8.3 budget of
  ``--caps-tokens`` tokens, half to passages, the rest shared by entities, relations and reports) — by every
  reader; report Table 5: per category the mean over readers of each arm, the delta and the items whose
  score summed over the readers rose (+) or fell (–) (:mod:`evaluation.paired`), and the same per reader.
- ``noise``: index the same spaces twice into ``<realm>_1`` and ``<realm>_2``, each pass sending its own
  sampling seed so the response cache cannot hand the second pass the first one's extractions; answer both
  with the same settings; report the per-category differences and the cells that agree (§8.14).
- ``sweep``: one fixed graph, N readers, one setting: Table 12 (overall, refused, per category, the union
  over readers, the items no reader reached) and a table per reader.

Every run takes model names for extraction (``--extraction-model``), answering (``--reader``, repeated) and
judging (``--judge``, repeated; the answering model is never on its own jury), any litellm names, reached at
``--api-base`` or the configuration's ``llm.api_base`` or, per model, ``--model-api-base MODEL=URL``; keys
come from the configuration or the providers' usual environment variables. Scoring is chosen per item
(:mod:`evaluation.answering`): LongMemEval by the judge panel, ECT-QA strictly where the gold is a figure or a
period. An item whose indexing failed, that a reader refused or that no judge could grade is excluded in
every arm and listed; the run is then not reportable (§9). Results go to ``--out`` (default
``evaluation/results``) as ``<name>.json`` and ``<name>.md`` (:mod:`evaluation.harness`);
``--record-cassette`` also writes every model response the run used to ``<name>.cassette.jsonl``, and
``--replay FILE`` runs again from such a file with no model call (a prompt it lacks is an error).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from evaluation.answering import (  # noqa: E402
    Item,
    Models,
    Scored,
    Spaces,
    answer_item,
    declare_spaces,
    ectqa_items,
    index_all,
    longmemeval_items,
    questions_items,
)
from evaluation.benchmarks import (  # noqa: E402
    RunGuard,
    check_company_counts,
    company_counts,
    load_ectqa_corpus,
    load_ectqa_questions,
    load_longmemeval,
)
from evaluation.harness import ROOT, RunRecord, Table, progress, timed_run, write_run  # noqa: E402
from evaluation.paired import Cell, PairedRow, paired_rows, reader_rows, union_over_readers, unreached  # noqa: E402

CAPS = "caps"
CAP_SHARES = {
    "max_passage_tokens": 0.5,
    "max_entity_tokens": 1 / 6,
    "max_relation_tokens": 1 / 6,
    "max_community_tokens": 1 / 6,
}
"""How ``--flag caps`` divides ``--caps-tokens`` (§8.3: half to documents, the rest shared by the others)."""


def arms_for(flag: str, *, caps_tokens: int = 4000) -> dict[str, dict[str, Any]]:
    """The two arms of ``--flag``: ``{"off": overrides, "on": overrides}`` of :class:`QueryParam` fields.
    Raises ``ValueError`` for a flag that is neither ``caps`` nor a boolean QueryParam field."""
    from pgrag_dag.query_param import QueryParam

    if flag == CAPS:
        on = {f: int(caps_tokens * share) for f, share in CAP_SHARES.items()}
        return {"off": dict.fromkeys(CAP_SHARES), "on": on}
    bools = [f.name for f in dataclasses.fields(QueryParam) if f.type in (bool, "bool")]
    if flag not in bools:
        raise ValueError(f"--flag {flag!r}: give {CAPS!r} or a boolean QueryParam field ({', '.join(bools)})")
    return {"off": {flag: False}, "on": {flag: True}}


# -- what a run reads -------------------------------------------------------------------------------


@dataclasses.dataclass
class Plan:
    """What a run indexes and asks: ``items``, ``spaces`` (space → documents; ``None`` for configured
    spaces), the ``guard``, the ``benchmark`` name and the input files."""

    benchmark: str
    items: list[Item]
    spaces: Spaces | None
    guard: RunGuard
    inputs: dict[str, str]


def plan(args: argparse.Namespace) -> Plan:
    """Load the benchmark of ``args`` (``--benchmark``, ``--data`` / ``--corpus`` + ``--questions``,
    ``--limit``). Raises :class:`~evaluation.benchmarks.BenchmarkFormatError` on a malformed file."""
    if args.benchmark == "longmemeval":
        instances, guard = load_longmemeval(Path(args.data), strict=False)
        items, spaces = longmemeval_items(instances)
        inputs = {"data": str(args.data)}
    elif args.benchmark == "ectqa":
        transcripts, corpus_guard = load_ectqa_corpus(Path(args.corpus), strict=False)
        questions, guard = load_ectqa_questions(Path(args.questions), strict=False)
        for k, why in corpus_guard.excluded.items():
            guard.exclude(f"transcript {k}", why)
        items, spaces = ectqa_items(questions, transcripts)
        check_company_counts(
            guard,
            company_counts(transcripts),
            expected=args.expected_quarters,
            needed=[c for q in questions for c in q.companies],
        )
        inputs = {"corpus": str(args.corpus), "questions": str(args.questions)}
    else:
        items, spaces = questions_items(Path(args.data), space=args.space), None
        guard = RunGuard(f"questions {Path(args.data).name}", len(items))
        inputs = {"data": str(args.data), "space": args.space}
    if args.limit is not None:
        items = items[: args.limit]
        sliced = RunGuard(
            f"{guard.benchmark} (first {len(items)})",
            len(items),
            dict(guard.excluded),
            dict(guard.count_mismatches),
        )
        guard, spaces = sliced, spaces and {s: d for s, d in spaces.items() if s in {i.space for i in items}}
    return Plan(guard.benchmark, items, spaces, guard, inputs)


# -- the harness --------------------------------------------------------------------------------------


class Harness:
    """Settings, realms, clients and the answers of one run (what :func:`run` drives)."""

    def __init__(self, args: argparse.Namespace, p: Plan, realms: Sequence[str], stem: str) -> None:
        from pgrag_dag.config import load_settings

        self.args, self.plan, self.realms, self.stem = args, p, list(realms), stem
        base = load_settings(args.config)
        extraction = args.extraction_model or base.llm.models[0]
        api_base = args.api_base or base.llm.api_base
        self.models = Models(
            extraction,
            list(args.reader),
            list(args.judge or []),
            base.llm.model_copy(update={"api_base": api_base}),
            dict(kv.split("=", 1) for kv in args.model_api_base or []),
            replay_only=bool(args.replay),
        )
        if p.spaces is not None:
            decl = declare_spaces(p.spaces, Path(args.out) / f"{stem}_spaces")
            realm_spaces = {r: {"spaces": decl} for r in self.realms}
        else:  # configured spaces: each realm of the run reads the configured realm's declaration
            declared = base.realms.get(args.realm)
            if declared is None:
                raise SystemExit(f"realm {args.realm!r} is not declared in the configuration")
            realm_spaces = {r: declared.model_dump(exclude_unset=True) for r in self.realms}
        llm = self.models.settings_for(extraction).model_dump()
        self.settings = load_settings(args.config, realms=realm_spaces, llm=llm)
        self.overrides = dict(_setting(kv) for kv in args.set or [])
        self.guard = p.guard
        self.graphs: dict[str, dict[str, Any]] = {}
        self.scored: list[Scored] = []

    def engine(self, realm: str, *, seed: int | None = None) -> Any:
        """An engine whose extraction client is the run's recording client for the extraction model."""
        from pgrag_dag.engine import Engine

        e = Engine.from_settings(self.settings)
        e._client = self.models.client(e.dsn, self.models.extraction, seed=seed)
        if getattr(self, "_embedder", None) is None:
            self._embedder = e.embedder()
        e._embedder = self._embedder
        return e

    def prepare(self, engine: Any) -> None:
        """Import ``--replay``'s cassette; drop the run's realms unless ``--reuse-realm`` (never a configured
        realm read in place)."""
        from pgrag_dag.errors import ConfigurationError
        from pgrag_dag.operate.deletion import delete_realm
        from pgrag_dag.store import cache, schema

        if self.args.replay:
            with engine.connect(autocommit=True) as conn:
                schema.init_control(conn)
                cache.import_cassette(conn, Path(self.args.replay))
        if self.args.reuse_realm:
            return
        for realm in self.realms:
            if self.plan.spaces is None and realm == self.args.realm:
                continue
            try:
                delete_realm(engine, realm)
            except ConfigurationError:  # never indexed: nothing to drop
                pass

    def index(self, engine: Any, realm: str) -> None:
        """Index every space the items read into ``realm`` (exclusions on the guard)."""
        spaces = sorted({i.space for i in self.plan.items if i.id not in self.guard.excluded})
        communities = _needs_communities(self.param("any", {}).mode)
        self.graphs[realm] = index_all(
            engine,
            realm,
            spaces,
            self.plan.items,
            self.guard,
            communities=communities,
            progress=progress,
            replay=self.models.replay_only,
        )

    def param(self, space: str, arm: dict[str, Any]) -> Any:
        """The query of one arm: the configured retrieval settings, then ``--set``, then the arm's fields."""
        from pgrag_dag.query_param import QueryParam

        return QueryParam.from_settings(self.settings.retrieval, space=space, **{**self.overrides, **arm})

    def answer(
        self, engine: Any, realm: str, arms: dict[str, dict[str, Any]], *, label: str | None = None
    ) -> None:
        """Answer every item not excluded, under every arm, by every reader (judged by the panel)."""
        readers = {r: self.models.client(engine.dsn, r) for r in self.models.readers}
        judges = {j: self.models.client(engine.dsn, j) for j in self.models.judges}
        todo = [i for i in self.plan.items if i.id not in self.guard.excluded]
        for item in progress(todo, f"answering ({realm})", total=len(todo)):
            for arm, fields in arms.items():
                for reader, client in readers.items():
                    s = answer_item(
                        engine,
                        realm,
                        item,
                        self.param(item.space, fields),
                        arm=label or arm,
                        reader=reader,
                        client=client,
                        judges=judges,
                        guard=self.guard,
                    )
                    if s is None:
                        break
                    self.scored.append(s)
                if item.id in self.guard.excluded:
                    break

    def kept(self) -> list[Scored]:
        """The answers of items not excluded (the arms stay paired)."""
        return [s for s in self.scored if s.item.id not in self.guard.excluded]

    def cells(self, arm: str, reader: str | None = None) -> dict[Cell, float]:
        """(item, reader) → score of one arm (one reader's, when given)."""
        return {
            (s.item.id, s.reader): s.score for s in self.kept() if s.arm == arm and reader in (None, s.reader)
        }

    def record(self, name: str, kind: str, arms: dict[str, dict[str, Any]]) -> RunRecord:
        """The run record, before results and tables."""
        a = self.args
        config = {
            "kind": kind,
            "benchmark": self.plan.benchmark,
            "inputs": self.plan.inputs,
            "realms": self.realms,
            "arms": arms,
            "set": self.overrides,
            "limit": a.limit,
            "reuse_realm": bool(a.reuse_realm),
            "replayed_from": a.replay,
            "embedding": self.settings.embedding.model,
            "chunking": self.settings.chunking.model_dump(),
            "extraction": self.settings.extraction.model_dump(),
            "temperature": self.settings.llm.temperature,
            "items": [i.id for i in self.plan.items],
        }
        return RunRecord(name, config=config, models=self.models.as_record(), guard=self.guard)

    def finish(self, record: RunRecord) -> tuple[Path, Path]:
        """Add the answers, the graphs and model usage; write the record (and the cassette when asked)."""
        from pgrag_dag.store.cache import cassette_line

        record.results["graphs"] = self.graphs
        record.results["answers"] = [s.as_dict() for s in self.kept()]
        record.results["excluded_answers"] = [
            s.as_dict() for s in self.scored if s.item.id in self.guard.excluded
        ]
        record.results["usage"] = _usage(self.models)
        out = Path(self.args.out)
        if self.args.record_cassette:
            out.mkdir(parents=True, exist_ok=True)
            path = out / f"{self.stem}.cassette.jsonl"
            path.write_text("".join(cassette_line(e) for e in self.models.recorded()), encoding="utf-8")
            record.results["cassette"] = path.name
        return write_run(record, out)


def _usage(models: Models) -> dict[str, int]:
    calls = sum(c.usage.model_calls for c in models.clients)
    hits = sum(c.usage.cache_hits for c in models.clients)
    return {"model_calls": calls, "cache_hits": hits, "responses_recorded": len(models.recorded())}


def _needs_communities(mode: str) -> bool:
    from pgrag_dag.query_param import EVIDENCE

    return "communities" in EVIDENCE[mode]


def _setting(kv: str) -> tuple[str, Any]:
    key, _, raw = kv.partition("=")
    try:
        return key.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return key.strip(), raw


def _paired_table(
    title: str, rows: Sequence[PairedRow], heads: tuple[str, str, str], note: str, *, agreed: bool = False
) -> Table:
    head = ["Question type", "n", *heads, "+", "–"] + (["cells agreed"] if agreed else [])
    body = [
        [r.category, r.n, r.a, r.b, f"{r.delta:+.3f}", r.better, r.worse]
        + ([f"{r.agreed} of {r.cells}"] if agreed else [])
        for r in rows
    ]
    return Table(title, head, body, note=note)


# -- the three runs -----------------------------------------------------------------------------------


def _driven(
    args: argparse.Namespace,
    kind: str,
    stem: str,
    realms: list[str],
    arms: dict[str, dict[str, Any]],
    body: Callable[[Harness, RunRecord], None],
) -> RunRecord:
    """Plan the run, build its harness and record (``stem``: the file stem, ``{benchmark}`` filled in), run
    ``body`` timed, write the record, close the clients."""
    p = plan(args)
    stem = args.name or stem.format(benchmark=_slug(p.benchmark))
    h = Harness(args, p, realms, stem)
    record = h.record(stem, kind, arms)
    try:
        with timed_run(record):
            body(h, record)
            h.finish(record)
    finally:
        h.models.close()
    return record


def run_ablation(args: argparse.Namespace) -> RunRecord:
    """``ablate``: one graph, two arms (module docstring). Returns the record written."""
    arms = arms_for(args.flag, caps_tokens=args.caps_tokens)

    def body(h: Harness, record: RunRecord) -> None:
        engine = h.engine(args.realm)
        h.prepare(engine)
        h.index(engine, args.realm)
        h.answer(engine, args.realm, arms)
        cats = {i.id: i.category for i in h.plan.items}
        rows = paired_rows(h.cells("off"), h.cells("on"), cats)
        n = len(h.models.readers)
        record.tables.append(
            _paired_table(
                f"Paired ablation of {args.flag}, mean over {n} reader{'s' * (n != 1)}",
                rows,
                ("off", "on", "delta"),
                f"One graph (realm {args.realm}), the same questions and judges; only {args.flag} differs. "
                "+ / – count items whose score summed over the readers rose / fell.",
            )
        )
        record.results["table"] = [r.as_dict() for r in rows]
        record.results["per_reader"] = {}
        for reader in h.models.readers:
            rr = paired_rows(h.cells("off", reader), h.cells("on", reader), cats)
            record.results["per_reader"][reader] = [r.as_dict() for r in rr]
            record.tables.append(_paired_table(f"Reader {reader}", rr, ("off", "on", "delta"), ""))

    return _driven(args, "ablation", "ablation_{benchmark}_" + args.flag, [args.realm], arms, body)


def run_noise_floor(args: argparse.Namespace) -> RunRecord:
    """``noise``: index twice into two realms, answer both the same way, compare (§8.14)."""
    realms = [f"{args.realm}_1", f"{args.realm}_2"]

    def body(h: Harness, record: RunRecord) -> None:
        engines = [h.engine(r, seed=n) for n, r in enumerate(realms, 1)]
        h.prepare(engines[0])
        for engine, realm in zip(engines, realms):
            h.index(engine, realm)
        for engine, realm in zip(engines, realms):
            h.answer(engine, realm, {"same": {}}, label=realm)
        rows = paired_rows(h.cells(realms[0]), h.cells(realms[1]), {i.id: i.category for i in h.plan.items})
        record.tables.append(
            _paired_table(
                "Re-indexing noise floor: the same configuration indexed twice",
                rows,
                ("index 1", "index 2", "difference"),
                f"Realms {realms[0]} and {realms[1]}, each indexed from scratch with its own sampling seed; "
                "the same questions, readers, judges and settings. + / – count items whose "
                "summed score rose / fell.",
                agreed=True,
            )
        )
        g1, g2 = (h.graphs[r] for r in realms)
        record.tables.append(
            Table(
                "The two graphs",
                ["space", "entities 1", "entities 2", "relations 1", "relations 2"],
                [
                    [
                        s,
                        g1.get(s, {}).get("entities"),
                        g2.get(s, {}).get("entities"),
                        g1.get(s, {}).get("relations"),
                        g2.get(s, {}).get("relations"),
                    ]
                    for s in sorted(set(g1) | set(g2))
                ],
            )
        )
        record.results["table"] = [r.as_dict() for r in rows]

    return _driven(args, "noise_floor", "noise_floor_{benchmark}", realms, {"same": {}}, body)


def run_sweep(args: argparse.Namespace) -> RunRecord:
    """``sweep``: N readers over one fixed graph (§8.12, Table 12), a table per reader."""

    def body(h: Harness, record: RunRecord) -> None:
        engine = h.engine(args.realm)
        h.prepare(engine)
        h.index(engine, args.realm)
        h.answer(engine, args.realm, {"configured": {}})
        kept, items = h.kept(), h.plan.items
        cats = {i.id: i.category for i in items}
        scores = {(s.item.id, s.reader): s.score for s in kept}
        refused = {(s.item.id, s.reader): s.refused for s in kept}
        rows = reader_rows(scores, refused, cats, {i.id: i.answerable for i in items}, h.models.readers)
        union = union_over_readers(scores, cats)
        categories = sorted({c for r in rows for c in r.by_category})
        record.tables.append(
            Table(
                f"{len(rows)} answering models over one fixed graph",
                ["Answering model", "n", "overall", "refused", *categories],
                [
                    [r.reader, r.n, r.overall, r.refused, *(r.by_category.get(c) for c in categories)]
                    for r in rows
                ]
                + [
                    [
                        union.reader,
                        union.n,
                        union.overall,
                        "—",
                        *(union.by_category.get(c) for c in categories),
                    ]
                ],
                note=f"Realm {args.realm}, extracted once by {h.models.extraction}; only the answering model "
                "differs. “refused” counts answerable questions declined.",
            )
        )
        for r in rows:
            record.tables.append(
                Table(
                    f"Reader {r.reader}",
                    ["Question type", "mean"],
                    [[c, v] for c, v in r.by_category.items()] + [["overall", r.overall]],
                )
            )
        record.results["readers"] = [dataclasses.asdict(r) for r in rows]
        record.results["union"] = dataclasses.asdict(union)
        record.results["unreached"] = unreached(scores)

    return _driven(args, "reader_sweep", "reader_sweep_{benchmark}", [args.realm], {"configured": {}}, body)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")


# -- command line -------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    """The ``python -m evaluation.ablation`` command line (module docstring)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--benchmark", choices=("longmemeval", "ectqa", "questions"), required=True)
    common.add_argument("--data", help="LongMemEval JSON, or the questions JSONL of --benchmark questions")
    common.add_argument("--corpus", help="ECT-QA corpus JSONL (.gz)")
    common.add_argument("--questions", help="ECT-QA questions JSONL")
    common.add_argument("--space", help="--benchmark questions: the configured space the questions read")
    common.add_argument(
        "--expected-quarters", type=int, default=16, help="ECT-QA transcripts per company (16)"
    )
    common.add_argument("--limit", type=int, help="only the first N items")
    common.add_argument("--config", help="pgrag.yaml (database, embedding, llm keys); default $PGRAG_CONFIG")
    common.add_argument(
        "--realm", default="eval_paired", help="the realm indexed (noise: <realm>_1, <realm>_2)"
    )
    common.add_argument("--reuse-realm", action="store_true", help="keep the realm's graph (a fixed graph)")
    common.add_argument("--extraction-model", help="litellm name (default: the configuration's first model)")
    common.add_argument("--reader", action="append", required=True, help="answering model (repeat for more)")
    common.add_argument("--judge", action="append", help="judge model of the panel (repeat)")
    common.add_argument("--api-base", help="OpenAI-compatible base URL for every model")
    common.add_argument(
        "--model-api-base", action="append", metavar="MODEL=URL", help="base URL of one model"
    )
    common.add_argument(
        "--set", action="append", metavar="FIELD=VALUE", help="QueryParam field for every arm"
    )
    common.add_argument("--out", default=str(ROOT / "evaluation" / "results"), help="results directory")
    common.add_argument("--name", help="result file stem")
    common.add_argument("--record-cassette", action="store_true", help="write <name>.cassette.jsonl")
    common.add_argument("--replay", help="a cassette of an earlier run: answer from it, call no model")
    top = argparse.ArgumentParser(prog="python -m evaluation.ablation", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="command", required=True)
    ab = sub.add_parser("ablate", parents=[common], help="two arms over one graph (Table 5)")
    ab.add_argument("--flag", default="render_relation_validity", help="boolean QueryParam field, or 'caps'")
    ab.add_argument("--caps-tokens", type=int, default=4000, help="--flag caps: the whole budget in tokens")
    sub.add_parser("noise", parents=[common], help="index twice, compare (§8.14)")
    sub.add_parser("sweep", parents=[common], help="N readers over one graph (Table 12)")
    return top


def main(argv: Sequence[str] | None = None) -> RunRecord:
    """Parse ``argv``, run the command and print where the record went and whether it is reportable."""
    args = parser().parse_args(argv)
    if args.command == "ablate":
        try:
            arms_for(args.flag, caps_tokens=args.caps_tokens)
        except ValueError as exc:
            parser().error(str(exc))
    need = {"longmemeval": ("data",), "ectqa": ("corpus", "questions"), "questions": ("data", "space")}
    missing = [f"--{n}" for n in need[args.benchmark] if not getattr(args, n)]
    if missing:
        parser().error(f"--benchmark {args.benchmark} needs {' and '.join(missing)}")
    if args.benchmark == "longmemeval" and not args.judge:
        parser().error("LongMemEval answers are graded by the judge panel: give at least one --judge")
    record = {"ablate": run_ablation, "noise": run_noise_floor, "sweep": run_sweep}[args.command](args)
    print(
        f"{record.name}: "
        f"{'reportable' if record.reportable else record.guard.summary() if record.guard else ''} -> "
        f"{Path(args.out) / record.name}.md",
        file=sys.stderr,
    )
    return record


if __name__ == "__main__":
    main()
