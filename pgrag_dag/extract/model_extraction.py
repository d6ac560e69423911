"""Extraction operator: the model reads each chunk, then gleans what it missed (paper §4.1–4.2).

Input frame ``chunks`` (as stored, in document order): chunk_id (Int64), doc_key, chunk_index, title,
source, text.

Output frame ``raw_extractions`` — one row per (chunk, pass): chunk_id, pass (0 = first pass,
1.. = gleaning), model, prompt_version, raw_text, parsed (JSON text or null), parse_status
(``ok`` | ``parse_error`` | ``model_error``), error, prompt_tokens, completion_tokens, cache_hit.

The model's text is untrusted: it is parsed (code fences, leading prose and trailing commas are
tolerated), never repaired or guessed at. A chunk whose first pass fails keeps its raw text and
error; a failed gleaning pass is logged and the first pass kept. Stored responses that failed to parse
are parsed again on every run (:func:`reparse_extraction`), so a fixed parser recovers them.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import polars as pl

from pgrag_dag import progress
from pgrag_dag.config.sections import GateSettings, ModelExtractionSettings
from pgrag_dag.errors import ExtractionError, ModelAccessError, ModelError
from pgrag_dag.frames import RAW_SCHEMA
from pgrag_dag.gate_rules import UNENCODABLE, clean_name, identity_key, name_gate
from pgrag_dag.providers import prompts
from pgrag_dag.providers.json_reply import evict_hint, parse_json_object
from pgrag_dag.providers.llm import ModelClient, map_calls
from pgrag_dag.storable import clean_json, clean_text, escape_unstorable, has_lone_surrogate
from pgrag_dag.vocabulary import Vocabulary

log = logging.getLogger(__name__)
_DEFAULT_GATES = GateSettings()


def parse_extraction(text: str) -> dict[str, list[dict[str, Any]]]:
    """Parse an extraction response into ``{"entities": [...], "triples": [...]}``.

    NUL is removed from every string. An entity or triple holding a lone surrogate anywhere (a
    character no UTF-8 encoder accepts) is kept with those characters replaced by U+FFFD and an
    :data:`~pgrag_dag.gate_rules.UNENCODABLE` key naming the field and its original (escaped) value: the
    gates refuse it (:attr:`~pgrag_dag.gate_rules.Gate.UNENCODABLE_TEXT`) and it never feeds the document
    context. Raises :class:`ValueError` when the object has neither list, or either is not a list of objects.
    """
    obj = parse_json_object(text, lone_surrogates="keep")
    if "entities" not in obj and "triples" not in obj:
        raise ValueError("the object has neither 'entities' nor 'triples'")
    out: dict[str, list[dict[str, Any]]] = {}
    for key in ("entities", "triples"):
        items = obj.get(key) or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ValueError(f"'{key}' is not a list of objects")
        out[key] = [_mark_unencodable(i) for i in items]
    return out


def reparse_extraction(text: str) -> str:
    """The ``parsed`` JSON text of a stored raw response, by today's :func:`parse_extraction` — how the
    ``llm`` extractor's ``parse_error`` rows are re-evaluated on every run, with no model call.

    Raises :class:`ValueError` when it still does not parse."""
    return json.dumps(parse_extraction(text), ensure_ascii=False)


def _mark_unencodable(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` unchanged when storable; else its strings cleaned and :data:`UNENCODABLE` set."""
    bad = next(
        ((k, v) for k, v in record.items() if has_lone_surrogate(json.dumps([k, v], ensure_ascii=False))),
        None,
    )
    if bad is None:
        return record
    return clean_json(record, lambda s: clean_text(s)[0]) | {
        UNENCODABLE: (
            f"{escape_unstorable(bad[0])}: {escape_unstorable(json.dumps(bad[1], ensure_ascii=False))}"
        )
    }


def usable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` without those :func:`parse_extraction` marked :data:`UNENCODABLE`."""
    return [r for r in records if UNENCODABLE not in r]


def system_prompt(vocabulary: Vocabulary | None) -> str:
    """The extraction system prompt, with the space's vocabulary rendered when it has one (§4.5)."""
    rule = (
        prompts.VOCABULARY_RULE.format(terms=vocabulary.render()) if vocabulary and vocabulary.terms else ""
    )
    return prompts.EXTRACT_SYSTEM.replace("{vocabulary_rule}", rule)


def _context(names: list[str] | None) -> str:
    return prompts.CONTEXT_LINE.format(names="; ".join(names)) if names else ""


def extraction_messages(
    chunk: dict[str, Any], *, vocabulary: Vocabulary | None = None, names: list[str] | None = None
) -> list[dict[str, str]]:
    """The first-pass messages for one chunk: title, source, the document's names so far, the framed text."""
    user = prompts.EXTRACT_USER.format(
        title=chunk["title"], source=chunk["source"], context=_context(names), text=chunk["text"]
    )
    return [{"role": "system", "content": system_prompt(vocabulary)}, {"role": "user", "content": user}]


def gleaning_messages(
    chunk: dict[str, Any],
    previous: dict[str, Any],
    *,
    vocabulary: Vocabulary | None = None,
    names: list[str] | None = None,
) -> list[dict[str, str]]:
    """The gleaning-pass messages: what was already extracted, and a request for what was missed (§4.2)."""
    if any(
        UNENCODABLE in r for v in previous.values() for r in v
    ):  # asked for again: the model may write it well
        previous = {k: usable(v) for k, v in previous.items()}
    user = prompts.GLEAN_USER.format(
        previous=json.dumps(previous, ensure_ascii=False, sort_keys=True),
        title=chunk["title"],
        source=chunk["source"],
        context=_context(names),
        text=chunk["text"],
    )
    return [{"role": "system", "content": system_prompt(vocabulary)}, {"role": "user", "content": user}]


class DocumentContext:
    """Canonical names found so far per document, threaded through its chunks (§4.1).

    Names are recorded per (document, chunk index); a chunk sees the names of its document's chunks
    before a given index, ranked by how many chunks named them (ties: first seen), capped at ``cap``.
    Only names that pass the name gates are kept, so a pronoun is never fed back to the model.
    """

    def __init__(self, cap: int, seed: dict[str, list[tuple[int, list[str]]]] | None = None) -> None:
        self.cap = cap
        self._by_chunk: dict[str, dict[int, list[str]]] = {}
        for doc_key, chunks in (seed or {}).items():
            for chunk_index, names in chunks:
                self.add(doc_key, chunk_index, names)

    def add(self, doc_key: str, chunk_index: int, names: list[str]) -> None:
        """Record entity names one chunk (one pass) of ``doc_key`` produced."""
        kept = [n for n in (clean_name(x) for x in names) if n and name_gate(n, _DEFAULT_GATES) is None]
        self._by_chunk.setdefault(doc_key, {}).setdefault(chunk_index, []).extend(kept)

    def names(self, doc_key: str, before: int) -> list[str]:
        """Up to ``cap`` names from ``doc_key``'s chunks with index < ``before``."""
        seen: dict[str, list[Any]] = {}  # identity -> [name, chunks naming it, first seen]
        for index in sorted(i for i in self._by_chunk.get(doc_key, {}) if i < before):
            for name in dict.fromkeys(self._by_chunk[doc_key][index]):
                entry = seen.setdefault(identity_key(name), [name, 0, len(seen)])
                entry[1] += 1
        ranked = sorted(seen.values(), key=lambda e: (-e[1], e[2]))
        return [name for name, _, _ in ranked[: self.cap]]


def entity_names(parsed: dict[str, Any]) -> list[str]:
    """The entity names of one parsed extraction, in order (an :data:`UNENCODABLE` record's left out)."""
    return [name for e in usable(parsed.get("entities", [])) if isinstance(name := e.get("name"), str)]


def chunk_label(chunk: dict[str, Any]) -> str:
    """``doc_key#chunk_index``: how errors name a chunk."""
    return f"{chunk['doc_key']}#{chunk['chunk_index']}"


def _row(chunk_id: int, p: int, settings: ModelExtractionSettings, **kw: Any) -> dict[str, Any]:
    row = dict.fromkeys(RAW_SCHEMA)
    row.update(
        chunk_id=chunk_id,
        prompt_version=settings.prompt_version,
        prompt_tokens=0,
        completion_tokens=0,
        cache_hit=False,
        model="",
    )
    row["pass"] = p
    row.update(kw)
    return row


def extract_chunk(
    chunk: dict[str, Any],
    client: ModelClient,
    settings: ModelExtractionSettings,
    *,
    vocabulary: Vocabulary | None = None,
    names: list[str] | None = None,
    completed: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """First pass plus ``settings.gleaning_passes`` gleaning passes for one chunk → raw rows.

    ``completed``: the chunk's stored successful passes 0..p-1 (raw rows) when an earlier run's pass p
    failed — they are kept as they are and gleaning resumes at pass p (no model call for them).
    A :class:`ModelError` is kept in the chunk's rows (``model_error``); a :class:`DatabaseError` (the
    response cache is gone) and a :class:`ModelAccessError` (no model of the failover list accepts its
    configuration: a missing key, an unknown model) propagate, whichever pass met them.
    """
    cid = int(chunk["chunk_id"])
    if completed:
        rows = [dict(r) for r in completed]
        parsed = [json.loads(r["parsed"]) for r in rows]
        merged = {k: [x for p in parsed for x in p.get(k, [])] for k in ("entities", "triples")}
        if len(rows) > 1 and not parsed[-1].get("entities") and not parsed[-1].get("triples"):
            return rows  # the last stored gleaning pass found nothing: gleaning had ended
        return rows + _glean(chunk, client, settings, merged, len(rows), vocabulary=vocabulary, names=names)
    try:
        first = client.complete(
            extraction_messages(chunk, vocabulary=vocabulary, names=names), purpose="extract"
        )
    except ModelAccessError:  # no chunk can be extracted with this configuration: the stage stops at once
        raise
    except ModelError as exc:
        return [_row(cid, 0, settings, parse_status="model_error", error=f"{chunk_label(chunk)}: {exc}")]
    common = {
        "model": first.model,
        "raw_text": first.text,
        "prompt_tokens": first.prompt_tokens,
        "completion_tokens": first.completion_tokens,
        "cache_hit": first.cache_hit,
    }
    try:
        merged = parse_extraction(first.text)
    except ValueError as exc:
        log.warning("extraction of %s unparseable: %s", chunk_label(chunk), exc)
        client.forget(first)
        return [
            _row(
                cid,
                0,
                settings,
                parse_status="parse_error",
                error=f"{chunk_label(chunk)}: {exc}{evict_hint(first)}",
                **common,
            )
        ]
    rows = [
        _row(cid, 0, settings, parse_status="ok", parsed=json.dumps(merged, ensure_ascii=False), **common)
    ]
    return rows + _glean(chunk, client, settings, merged, 1, vocabulary=vocabulary, names=names)


def _glean(
    chunk: dict[str, Any],
    client: ModelClient,
    settings: ModelExtractionSettings,
    merged: dict[str, Any],
    start: int,
    *,
    vocabulary: Vocabulary | None,
    names: list[str] | None,
) -> list[dict[str, Any]]:
    """Gleaning passes ``start..settings.gleaning_passes`` over what ``merged`` already holds (§4.2);
    stops after a failed pass (kept with its error) or one that finds nothing."""
    cid = int(chunk["chunk_id"])
    rows: list[dict[str, Any]] = []
    for p in range(start, settings.gleaning_passes + 1):
        try:
            more = client.complete(
                gleaning_messages(chunk, merged, vocabulary=vocabulary, names=names), purpose="glean"
            )
        except ModelAccessError:
            raise
        except ModelError as exc:
            log.warning("gleaning pass %d of %s failed; first pass kept: %s", p, chunk_label(chunk), exc)
            rows.append(
                _row(cid, p, settings, parse_status="model_error", error=f"{chunk_label(chunk)}: {exc}")
            )
            break
        common = {
            "model": more.model,
            "raw_text": more.text,
            "prompt_tokens": more.prompt_tokens,
            "completion_tokens": more.completion_tokens,
            "cache_hit": more.cache_hit,
        }
        try:
            extra = parse_extraction(more.text)
        except ValueError as exc:
            log.warning("gleaning pass %d of %s unparseable; first pass kept: %s", p, chunk_label(chunk), exc)
            client.forget(more)
            rows.append(
                _row(
                    cid,
                    p,
                    settings,
                    parse_status="parse_error",
                    error=f"{chunk_label(chunk)}: {exc}{evict_hint(more)}",
                    **common,
                )
            )
            break
        rows.append(
            _row(cid, p, settings, parse_status="ok", parsed=json.dumps(extra, ensure_ascii=False), **common)
        )
        if not extra["entities"] and not extra["triples"]:
            break
        merged = {k: merged[k] + extra[k] for k in ("entities", "triples")}
    return rows


def extract_chunks(
    chunks: pl.DataFrame,
    client: ModelClient,
    settings: ModelExtractionSettings,
    *,
    vocabulary: Vocabulary | None = None,
    context: DocumentContext | None = None,
    completed: dict[int, list[dict[str, Any]]] | None = None,
    all_failed_raises: bool = True,
) -> pl.DataFrame:
    """Extract every chunk (in the frame's order, which should be document order) → ``raw_extractions``.

    A document's chunks go in batches of ``settings.batch_size`` (by chunk index); batch r of every
    document runs in round r, its model calls concurrent (at most ``settings.concurrency`` at once), and
    each chunk's prompt carries the names its document's earlier batches produced (§3.4, §4.1); batch
    size 1 extracts each document strictly sequentially with per-chunk context. Rows keep chunk order. Raises
    :class:`ExtractionError` when there was at least one chunk and every chunk's first pass failed (§3.5: an
    outage is never an empty corpus); a single failed chunk is logged by ``doc_key#chunk_index`` and kept with
    its error. ``completed`` maps a chunk_id to its stored successful passes when a later pass failed before:
    that chunk resumes there (:func:`extract_chunk`). With ``all_failed_raises`` false the caller judges
    that itself (the ``raw_extractions`` stage, over every batch of a run): no ExtractionError is raised.
    Raises :class:`DatabaseError` at once when the response cache's database goes away: no further
    chunk is started (:func:`~pgrag_dag.providers.llm.map_calls`) and the client makes no further model call;
    likewise :class:`ModelAccessError` when every model refuses its configuration (issue 13).
    """
    completed = completed or {}
    items = list(chunks.iter_rows(named=True))
    context = context or DocumentContext(settings.context_names_cap)
    size = settings.batch_size
    results: dict[int, list[dict[str, Any]]] = {}
    # round r holds batch r of every document (chunk_index // batch_size == r): a chunk's prompt
    # depends only on its own document, whatever else is being extracted
    for r in sorted({int(c["chunk_index"]) // size for c in items}):
        batch = [(i, c) for i, c in enumerate(items) if int(c["chunk_index"]) // size == r]
        names = [context.names(c["doc_key"], r * size) for _, c in batch]
        before = len(results)

        def on_done(n: int, before: int = before) -> None:
            progress.advance(
                before + n,
                len(items),
                "chunks",
                model_calls=client.usage.model_calls,
                cache_hits=client.usage.cache_hits,
            )

        done = map_calls(
            lambda job: extract_chunk(
                job[0][1],
                client,
                settings,
                vocabulary=vocabulary,
                names=job[1],
                completed=completed.get(int(job[0][1]["chunk_id"])),
            ),
            list(zip(batch, names)),
            concurrency=settings.concurrency,
            on_done=on_done,
        )
        for (i, chunk), chunk_rows in zip(batch, done):
            for row in chunk_rows:
                if row["parse_status"] == "ok":
                    context.add(
                        chunk["doc_key"], int(chunk["chunk_index"]), entity_names(json.loads(row["parsed"]))
                    )
            results[i] = chunk_rows
    rows = [row for i in range(len(items)) for row in results[i]]
    frame = pl.DataFrame(rows, schema=RAW_SCHEMA)
    firsts = frame.filter(pl.col("pass") == 0)
    if all_failed_raises and items and firsts.filter(pl.col("parse_status") == "ok").height == 0:
        errors = firsts["error"].drop_nulls().head(3).to_list()
        raise ExtractionError(f"every one of {len(items)} chunk(s) failed extraction; first errors: {errors}")
    return frame
