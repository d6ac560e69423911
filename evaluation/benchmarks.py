"""Benchmark loaders for LongMemEval and ECT-QA, their documents for a space, and the harness guards (§8.1,
§8.2, §8.11, §9).

**LongMemEval** (Wu et al., 2024), its published JSON: one list of instances, each with ``question_id``,
``question_type``, ``question``, ``answer`` (a string; some published answers are numbers, read as
text), ``question_date``, ``haystack_session_ids``, ``haystack_dates``, ``haystack_sessions`` (one list of
``{"role", "content"}`` turns per session; other turn keys such as ``has_answer`` are kept out of the
text) and ``answer_session_ids``. A ``question_id`` ending in ``_abs`` is an abstention question
(``answerable`` is false). Every instance is its own space (§8.1): one document per session, ordered by
session date.

**ECT-QA** (Han et al., 2025; TG-RAG's ``ect-qa/`` folder and the Hugging Face dataset
``austinmyc/ECT-QA``). We have not downloaded it here; the field names below are those of the authors'
files as their build script (``build_graph.py``) reads the corpus and as published question lines are
quoted in public code that uses them — ``corpus/base.jsonl.gz`` / ``new.jsonl.gz``: one transcript per
line with ``company_name``, ``stock_code``, ``sector``, ``year`` (``"2022"``), ``quarter`` (``"q1"``),
``cleaned_content``, ``raw_content`` (optional ``URL``, ``token_count``); ``questions/local_*.jsonl``:
``question``, ``answer`` (``"unanswerable"`` for unanswerable ones), ``reasoning_type``
(``enumeration``, ``comparison``, ``unanswerable|out-of-scope``, ``unanswerable|nonfact``),
``question_type`` (``single-time query``, ``multi-time query``, ``relative-time query``, with
``|multi-companies`` or ``|multi-keywords``), ``num_hops`` and ``evidence_list`` (``company_name``,
``stock_code``, ``sector``, ``year``, ``quarter``, ``evidence``, ``ect_filename`` =
``{sector}-{stock_code}-{year}-{quarter}.json``). The published questions carry no id: ours is
``<file stem>:<line>``. A transcript's doc_key is its ``ect_filename`` stem, so evidence names the
documents it cites. The paper indexes one space per company plus a combined space (§8.1).

**Guards** (:class:`RunGuard`): a run with excluded items is non-reportable and lists them — "the
harness marks a run non-reportable until that count is zero" (§9) — and, for ECT-QA, per-company
document counts are checked against the expected count (16 quarters each in the paper) and against the
companies the questions need: a mismatch is listed and makes the run non-reportable (§8.11).

A malformed item raises :class:`BenchmarkFormatError` naming the file and the item (its id, else its
position); ``strict=False`` excludes it instead, on the returned guard.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from pgrag_dag.errors import PgragError

ORDER_FIELD = "order"
"""The metadata field a benchmark space orders its documents by (``order: metadata``)."""


def _number_as_text(value: Any) -> Any:
    """A number where the format has text (LongMemEval answers such as ``4``, a year as ``2022``) → its
    text."""
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


NumberText = Annotated[str, BeforeValidator(_number_as_text)]


class BenchmarkFormatError(PgragError):
    """A benchmark file or item that is not in the published format (``where``: file and item, ``reason``)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


@dataclass(frozen=True)
class Document:
    """A document a space can index: ``doc_key`` (unique in its space), ``title``, ``text``, ``order`` (a
    string that sorts in document order) and ``metadata`` (JSON values)."""

    doc_key: str
    title: str
    text: str
    order: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class RunGuard:
    """What keeps a run from being reported: ``excluded`` item id → reason, and ``count_mismatches``
    (ECT-QA: company → (documents found, expected)). ``items`` is the number of items the benchmark has."""

    benchmark: str
    items: int
    excluded: dict[str, str] = field(default_factory=dict)
    count_mismatches: dict[str, tuple[int, int]] = field(default_factory=dict)

    def exclude(self, item: str, reason: str) -> None:
        """Exclude one item from the run (e.g. a session both extraction prompts refused, §8.2)."""
        self.excluded[item] = reason

    @property
    def reportable(self) -> bool:
        """True only when nothing is excluded and every document count is as expected (§9)."""
        return not self.excluded and not self.count_mismatches

    def report(self) -> dict[str, Any]:
        """The guard as JSON for a result file: reportable, the denominator, and every reason it is not."""
        return {
            "benchmark": self.benchmark,
            "reportable": self.reportable,
            "items": self.items,
            "scored": self.items - len(self.excluded),
            "excluded": dict(self.excluded),
            "count_mismatches": {
                c: {"found": f, "expected": e} for c, (f, e) in self.count_mismatches.items()
            },
        }

    def summary(self) -> str:
        """One line: ``reportable`` or ``NOT reportable: …`` naming every excluded item and count mismatch."""
        if self.reportable:
            return f"{self.benchmark}: reportable ({self.items} items)"
        parts = []
        if self.excluded:
            parts.append(
                f"{len(self.excluded)} of {self.items} items excluded: "
                + ", ".join(f"{k} ({v})" for k, v in self.excluded.items())
            )
        if self.count_mismatches:
            parts.append(
                "document counts differ: "
                + ", ".join(f"{c} has {f} of {e}" for c, (f, e) in self.count_mismatches.items())
            )
        return f"{self.benchmark}: NOT reportable — " + "; ".join(parts)


def _errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'item'}: {e['msg']}" for e in exc.errors())


def write_space_jsonl(documents: Iterable[Document], path: Path) -> Path:
    """Write ``documents`` as a JSONL file a space reads (one object per line: doc_key, title, text, order
    and the metadata fields); returns ``path``. See :func:`space_spec`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for d in documents:
            out.write(
                json.dumps(
                    {
                        **d.metadata,
                        "doc_key": d.doc_key,
                        "title": d.title,
                        "text": d.text,
                        ORDER_FIELD: d.order,
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    return path


def space_spec(path: Path, *, metadata_fields: Sequence[str] = ()) -> dict[str, Any]:
    """The space of a :func:`write_space_jsonl` file, as ``pgrag.yaml`` declares one
    (:class:`pgrag_dag.config.SpaceSpec`): a JSONL source keyed by ``doc_key`` and ordered by ``order``."""
    return {
        "sources": [
            {
                "path": str(path),
                "format": "jsonl",
                "key_field": "doc_key",
                "title_field": "title",
                "text_field": "text",
                "metadata_fields": [ORDER_FIELD, *metadata_fields],
            }
        ],
        "order": "metadata",
        "order_field": ORDER_FIELD,
    }


# -- LongMemEval --------------------------------------------------------------------------------

LME_DATE = "%Y/%m/%d (%a) %H:%M"
"""LongMemEval's date format (``2023/05/20 (Sat) 02:21``)."""


class Turn(BaseModel):
    """One chat turn of a LongMemEval session."""

    model_config = ConfigDict(extra="allow")
    role: str = Field(min_length=1)
    content: str


class LongMemEvalInstance(BaseModel):
    """One LongMemEval instance (module docstring); ``answerable`` is false for ``_abs`` question ids."""

    model_config = ConfigDict(extra="allow")
    question_id: str = Field(min_length=1)
    question_type: str = Field(min_length=1)
    question: str = Field(min_length=1)
    answer: NumberText
    question_date: str
    haystack_session_ids: list[str]
    haystack_dates: list[str]
    haystack_sessions: list[list[Turn]]
    answer_session_ids: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _aligned(self) -> LongMemEvalInstance:
        n = len(self.haystack_sessions)
        if not n:
            raise ValueError("haystack_sessions is empty")
        if len(self.haystack_session_ids) != n or len(self.haystack_dates) != n:
            raise ValueError(
                f"{n} haystack_sessions but {len(self.haystack_session_ids)} haystack_session_ids "
                f"and {len(self.haystack_dates)} haystack_dates"
            )
        if len(set(self.haystack_session_ids)) != n:
            raise ValueError("haystack_session_ids repeat")
        for d in (*self.haystack_dates, self.question_date):
            try:
                datetime.strptime(d, LME_DATE)
            except ValueError:
                raise ValueError(
                    f"date {d!r} is not in LongMemEval's format ('2023/05/20 (Sat) 02:21')"
                ) from None
        missing = set(self.answer_session_ids) - set(self.haystack_session_ids)
        if missing:
            raise ValueError(f"answer_session_ids {sorted(missing)} are not among the haystack sessions")
        return self

    @property
    def answerable(self) -> bool:
        """False for an abstention question (``question_id`` ending in ``_abs``)."""
        return not self.question_id.endswith("_abs")

    def documents(self) -> list[Document]:
        """One document per session, in date order (ties: the file's order): doc_key
        ``<question_id>/<session_id>``, title ``Session <id> (<date>)``, text the turns as ``role: content``
        lines; metadata ``session_id``, ``session_date`` (ISO), ``has_answer`` (the session is among
        ``answer_session_ids``)."""
        dated = sorted(
            enumerate(zip(self.haystack_session_ids, self.haystack_dates, self.haystack_sessions)),
            key=lambda e: (datetime.strptime(e[1][1], LME_DATE), e[0]),
        )
        gold = set(self.answer_session_ids)
        width = len(str(len(dated)))
        return [
            Document(
                f"{self.question_id}/{sid}",
                f"Session {sid} ({date})",
                "\n".join(f"{t.role}: {t.content}" for t in turns),
                str(pos).zfill(width),
                {
                    "session_id": sid,
                    "session_date": datetime.strptime(date, LME_DATE).isoformat(),
                    "has_answer": sid in gold,
                },
            )
            for pos, (_, (sid, date, turns)) in enumerate(dated)
        ]


def load_longmemeval(path: Path, *, strict: bool = True) -> tuple[list[LongMemEvalInstance], RunGuard]:
    """Read a LongMemEval JSON file: (instances in file order, the run's guard). Raises
    :class:`BenchmarkFormatError` for a file that is not a JSON list, and — with ``strict`` — for the
    first malformed instance (naming its ``question_id``, else its index); without ``strict`` a
    malformed instance is excluded on the guard instead. A repeated ``question_id`` is always an error."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BenchmarkFormatError(str(path), f"cannot be read as JSON ({exc})") from None
    if not isinstance(raw, list):
        raise BenchmarkFormatError(str(path), "is not a JSON list of instances")
    out: list[LongMemEvalInstance] = []
    guard = RunGuard("LongMemEval", len(raw))
    for i, item in enumerate(raw):
        qid = item.get("question_id") if isinstance(item, dict) else None
        name = f"instance {qid}" if isinstance(qid, str) and qid else f"instance #{i}"
        try:
            if not isinstance(item, dict):
                raise BenchmarkFormatError(f"{path} {name}", "is not a JSON object")
            inst = LongMemEvalInstance.model_validate(item)
        except (ValidationError, BenchmarkFormatError) as exc:
            reason = _errors(exc) if isinstance(exc, ValidationError) else exc.reason
            if strict:
                raise BenchmarkFormatError(f"{path} {name}", reason) from None
            guard.exclude(qid if isinstance(qid, str) and qid else f"#{i}", f"malformed: {reason}")
            continue
        out.append(inst)
    dupes = [q for q, n in Counter(i.question_id for i in out).items() if n > 1]
    if dupes:
        raise BenchmarkFormatError(str(path), f"question_id repeated: {dupes[:3]}")
    return out, guard


# -- ECT-QA -------------------------------------------------------------------------------------


class EctTranscript(BaseModel):
    """One ECT-QA corpus line (module docstring); ``text`` is ``cleaned_content``, else ``raw_content``."""

    model_config = ConfigDict(extra="allow")
    company_name: str = Field(min_length=1)
    stock_code: str = Field(min_length=1)
    sector: str = Field(min_length=1)
    year: Annotated[NumberText, Field(pattern=r"^(19|20)\d{2}$")]
    quarter: str = Field(pattern=r"^[qQ][1-4]$")
    cleaned_content: str | None = None
    raw_content: str | None = None

    @model_validator(mode="after")
    def _has_text(self) -> EctTranscript:
        if not (self.cleaned_content or "").strip() and not (self.raw_content or "").strip():
            raise ValueError("neither cleaned_content nor raw_content has text")
        return self

    @property
    def key(self) -> str:
        """``{sector}-{stock_code}-{year}-{quarter}``: the ``ect_filename`` stem evidence cites."""
        return f"{self.sector}-{self.stock_code}-{self.year}-{self.quarter.lower()}"

    @property
    def period(self) -> str:
        """``YYYY-Qn``."""
        return f"{self.year}-Q{self.quarter[1]}"

    def document(self) -> Document:
        """The transcript as a document: doc_key :attr:`key`, title ``<company> <YYYY-Qn> earnings call``,
        order ``YYYY-Qn <stock_code>`` (chronological, companies side by side in a combined space)."""
        text = self.cleaned_content if (self.cleaned_content or "").strip() else self.raw_content
        return Document(
            self.key,
            f"{self.company_name} {self.period} earnings call",
            text or "",
            f"{self.period} {self.stock_code}",
            {
                "company_name": self.company_name,
                "stock_code": self.stock_code,
                "sector": self.sector,
                "period": self.period,
            },
        )


class EctEvidence(BaseModel):
    """One evidence entry of an ECT-QA question."""

    model_config = ConfigDict(extra="allow")
    stock_code: str = Field(min_length=1)
    ect_filename: str = Field(pattern=r"^[^/\\]+\.json$")
    company_name: str | None = None
    year: str | None = None
    quarter: str | None = None
    evidence: str | None = None


class EctQuestion(BaseModel):
    """One ECT-QA question (module docstring); ``id`` is ``<file stem>:<line>``."""

    model_config = ConfigDict(extra="allow")
    id: str
    question: str = Field(min_length=1)
    answer: NumberText
    reasoning_type: str = Field(min_length=1)
    question_type: str = Field(min_length=1)
    num_hops: int = Field(ge=0)
    evidence_list: list[EctEvidence]

    @model_validator(mode="after")
    def _evidence(self) -> EctQuestion:
        if self.answerable and not self.evidence_list:
            raise ValueError("an answerable question has an empty evidence_list")
        return self

    @property
    def answerable(self) -> bool:
        """False when ``reasoning_type`` starts with ``unanswerable`` or the answer is ``unanswerable``."""
        return not (
            self.reasoning_type.startswith("unanswerable") or self.answer.strip().lower() == "unanswerable"
        )

    @property
    def category(
        self,
    ) -> Literal["unanswerable", "cross-company", "single-time", "multi-time", "relative-time"]:
        """Table 11's row: ``unanswerable``, ``cross-company`` (``multi-companies``), else the temporal
        shape."""
        if not self.answerable:
            return "unanswerable"
        if "multi-companies" in self.question_type:
            return "cross-company"
        shape = self.question_type.split("|")[0].strip().removesuffix(" query")
        if shape not in ("single-time", "multi-time", "relative-time"):
            raise ValueError(f"question {self.id}: unknown question_type {self.question_type!r}")
        return shape  # type: ignore[return-value]

    @property
    def companies(self) -> list[str]:
        """The stock codes its evidence cites, in first-cited order."""
        return list(dict.fromkeys(e.stock_code for e in self.evidence_list))

    @property
    def evidence_keys(self) -> list[str]:
        """The doc_keys of the transcripts its evidence cites (``ect_filename`` without ``.json``)."""
        return list(dict.fromkeys(e.ect_filename.removesuffix(".json") for e in self.evidence_list))


def _jsonl_lines(path: Path) -> list[tuple[int, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
            return [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise BenchmarkFormatError(str(path), f"cannot be read ({exc})") from None


def _ect_items(
    path: Path, model: type[BaseModel], *, strict: bool, guard: RunGuard, with_id: bool
) -> list[Any]:
    out = []
    for n, line in _jsonl_lines(path):
        item = f"{path.name.removesuffix('.gz').removesuffix('.jsonl')}:{n}"
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("is not a JSON object")
            out.append(model.model_validate({**rec, "id": item} if with_id else rec))
        except (ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
            reason = _errors(exc) if isinstance(exc, ValidationError) else str(exc)
            if strict:
                raise BenchmarkFormatError(f"{path} line {n} ({item})", reason) from None
            guard.exclude(item, f"malformed: {reason}")
    return out


def load_ectqa_corpus(path: Path, *, strict: bool = True) -> tuple[list[EctTranscript], RunGuard]:
    """Read an ECT-QA corpus file (``.jsonl`` or ``.jsonl.gz``): (transcripts in file order, guard).
    Raises :class:`BenchmarkFormatError` naming the file and line of a malformed transcript (with
    ``strict``; otherwise it is excluded on the guard) and for two transcripts of one company and quarter."""
    guard = RunGuard("ECT-QA corpus", len(_jsonl_lines(path)))
    out: list[EctTranscript] = _ect_items(path, EctTranscript, strict=strict, guard=guard, with_id=False)
    dupes = [k for k, n in Counter(t.key for t in out).items() if n > 1]
    if dupes:
        raise BenchmarkFormatError(str(path), f"transcripts repeated: {dupes[:3]}")
    return out, guard


def load_ectqa_questions(path: Path, *, strict: bool = True) -> tuple[list[EctQuestion], RunGuard]:
    """Read an ECT-QA question file (``.jsonl``): (questions in file order, guard). Raises
    :class:`BenchmarkFormatError` naming the file and line of a malformed question (with ``strict``;
    otherwise it is excluded on the guard)."""
    guard = RunGuard("ECT-QA", len(_jsonl_lines(path)))
    out: list[EctQuestion] = _ect_items(path, EctQuestion, strict=strict, guard=guard, with_id=True)
    for q in out:
        try:
            _ = q.category  # the property validates the question's shape
        except ValueError as exc:
            if strict:
                raise BenchmarkFormatError(f"{path} ({q.id})", str(exc)) from None
            guard.exclude(q.id, f"malformed: {exc}")
    return [q for q in out if q.id not in guard.excluded], guard


def ectqa_spaces(transcripts: Sequence[EctTranscript], *, combined: str = "all") -> dict[str, list[Document]]:
    """The paper's spaces (§8.1): one per company (by stock code, lower-cased), plus ``combined`` holding
    every transcript (for cross-company questions); documents in chronological order."""
    spaces: dict[str, list[Document]] = {}
    for t in sorted(transcripts, key=lambda t: (t.period, t.stock_code)):
        spaces.setdefault(re.sub(r"[^a-z0-9_]", "_", t.stock_code.lower()), []).append(t.document())
        spaces.setdefault(combined, []).append(t.document())
    return spaces


def check_company_counts(
    guard: RunGuard, counts: Mapping[str, int], *, expected: int = 16, needed: Iterable[str] = ()
) -> RunGuard:
    """Check per-company document counts (stock code → documents found) against ``expected`` (16
    quarters each in the paper), and that every company in ``needed`` (the questions' companies) has
    documents at all. Each mismatch is recorded on ``guard`` (company → (found, expected)), which is then
    not reportable (§8.11). Returns ``guard``."""
    for company in dict.fromkeys([*counts, *needed]):
        found = counts.get(company, 0)
        if found != expected:
            guard.count_mismatches[company] = (found, expected)
    return guard


def company_counts(transcripts: Iterable[EctTranscript]) -> dict[str, int]:
    """Transcripts per company (stock code → count)."""
    return dict(Counter(t.stock_code for t in transcripts))
