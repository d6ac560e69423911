"""Extraction operator: the model reads each chunk, then gleans what it missed (paper §4.1–4.2).

Input frame ``chunks`` (as stored): chunk_id (Int64), doc_key, chunk_index, title, source, text.

Output frame ``raw_extractions`` — one row per (chunk, pass): chunk_id, pass (0 = first pass,
1.. = gleaning), model, prompt_version, raw_text, parsed (JSON text or null), parse_status
(``ok`` | ``parse_error`` | ``model_error``), error, prompt_tokens, completion_tokens, cache_hit.

The model's text is untrusted: it is parsed (code fences, leading prose and trailing commas are
tolerated), never repaired or guessed at. A chunk whose first pass fails keeps its raw text and
error; a failed gleaning pass is logged and the first pass kept.
"""

from __future__ import annotations

import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import polars as pl

from pgrag_dag import prompts
from pgrag_dag.config import ExtractionSettings
from pgrag_dag.errors import ExtractionError, ModelError
from pgrag_dag.llm import ModelClient

log = logging.getLogger(__name__)

RAW_SCHEMA: dict[str, Any] = {
    "chunk_id": pl.Int64, "pass": pl.Int64, "model": pl.String, "prompt_version": pl.String,
    "raw_text": pl.String, "parsed": pl.String, "parse_status": pl.String, "error": pl.String,
    "prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, "cache_hit": pl.Boolean,
}
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def parse_json_object(text: str) -> dict[str, Any]:
    """Parse the one JSON object in a model response.

    Accepts the object bare, inside a code fence, after leading prose, or with trailing commas.
    Raises :class:`ValueError` for anything else (no object, two candidates, invalid JSON).
    """
    if text is None:
        raise ValueError("empty response")
    fenced = _FENCE.findall(text)
    candidates = fenced if fenced else [text]
    if len(candidates) > 1:
        raise ValueError("more than one fenced block")
    body = candidates[0].strip()
    if body.startswith("["):
        raise ValueError("the JSON value is an array, not an object")
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON object in the response")
    body = body[start : end + 1]
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        try:
            obj = json.loads(_TRAILING_COMMA.sub(r"\1", body))
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON: {exc.msg} at character {exc.pos}") from exc
    if not isinstance(obj, dict):
        raise ValueError("the JSON value is not an object")
    return obj


def parse_extraction(text: str) -> dict[str, list[dict[str, Any]]]:
    """Parse an extraction response into ``{"entities": [...], "triples": [...]}``.

    Raises :class:`ValueError` when the object has neither list, or either is not a list of objects.
    """
    obj = parse_json_object(text)
    if "entities" not in obj and "triples" not in obj:
        raise ValueError("the object has neither 'entities' nor 'triples'")
    out: dict[str, list[dict[str, Any]]] = {}
    for key in ("entities", "triples"):
        items = obj.get(key) or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ValueError(f"'{key}' is not a list of objects")
        out[key] = items
    return out


def extraction_messages(chunk: dict[str, Any]) -> list[dict[str, str]]:
    """The first-pass messages for one chunk (title, source and text framed for matching)."""
    user = prompts.EXTRACT_USER.format(title=chunk["title"], source=chunk["source"], text=chunk["text"])
    return [{"role": "system", "content": prompts.EXTRACT_SYSTEM}, {"role": "user", "content": user}]


def gleaning_messages(chunk: dict[str, Any], previous: dict[str, Any]) -> list[dict[str, str]]:
    """The gleaning-pass messages: what was already extracted, and a request for what was missed."""
    user = prompts.GLEAN_USER.format(
        previous=json.dumps(previous, ensure_ascii=False, sort_keys=True),
        title=chunk["title"], source=chunk["source"], text=chunk["text"],
    )
    return [{"role": "system", "content": prompts.EXTRACT_SYSTEM}, {"role": "user", "content": user}]


def chunk_label(chunk: dict[str, Any]) -> str:
    """``doc_key#chunk_index``: how errors name a chunk."""
    return f"{chunk['doc_key']}#{chunk['chunk_index']}"


def _row(chunk_id: int, p: int, settings: ExtractionSettings, **kw: Any) -> dict[str, Any]:
    row = dict.fromkeys(RAW_SCHEMA)
    row.update(chunk_id=chunk_id, prompt_version=settings.prompt_version, prompt_tokens=0,
               completion_tokens=0, cache_hit=False, model="")
    row["pass"] = p
    row.update(kw)
    return row


def extract_chunk(chunk: dict[str, Any], client: ModelClient, settings: ExtractionSettings) -> list[dict[str, Any]]:
    """First pass plus ``settings.gleaning_passes`` gleaning passes for one chunk → raw rows."""
    cid = int(chunk["chunk_id"])
    try:
        first = client.complete(extraction_messages(chunk), purpose="extract")
    except ModelError as exc:
        return [_row(cid, 0, settings, parse_status="model_error", error=f"{chunk_label(chunk)}: {exc}")]
    common = {"model": first.model, "raw_text": first.text, "prompt_tokens": first.prompt_tokens,
              "completion_tokens": first.completion_tokens, "cache_hit": first.cache_hit}
    try:
        merged = parse_extraction(first.text)
    except ValueError as exc:
        log.warning("extraction of %s unparseable: %s", chunk_label(chunk), exc)
        client.forget(first)
        return [_row(cid, 0, settings, parse_status="parse_error", error=f"{chunk_label(chunk)}: {exc}", **common)]
    rows = [_row(cid, 0, settings, parse_status="ok", parsed=json.dumps(merged, ensure_ascii=False), **common)]
    for p in range(1, settings.gleaning_passes + 1):
        try:
            more = client.complete(gleaning_messages(chunk, merged), purpose="glean")
        except ModelError as exc:
            log.warning("gleaning pass %d of %s failed; first pass kept: %s", p, chunk_label(chunk), exc)
            rows.append(_row(cid, p, settings, parse_status="model_error", error=f"{chunk_label(chunk)}: {exc}"))
            break
        common = {"model": more.model, "raw_text": more.text, "prompt_tokens": more.prompt_tokens,
                  "completion_tokens": more.completion_tokens, "cache_hit": more.cache_hit}
        try:
            extra = parse_extraction(more.text)
        except ValueError as exc:
            log.warning("gleaning pass %d of %s unparseable; first pass kept: %s", p, chunk_label(chunk), exc)
            client.forget(more)
            rows.append(_row(cid, p, settings, parse_status="parse_error", error=f"{chunk_label(chunk)}: {exc}", **common))
            break
        rows.append(_row(cid, p, settings, parse_status="ok", parsed=json.dumps(extra, ensure_ascii=False), **common))
        if not extra["entities"] and not extra["triples"]:
            break
        merged = {k: merged[k] + extra[k] for k in ("entities", "triples")}
    return rows


def extract_chunks(chunks: pl.DataFrame, client: ModelClient, settings: ExtractionSettings) -> pl.DataFrame:
    """Extract every chunk, ``settings.concurrency`` model calls at a time; rows keep chunk order.

    Returns the ``raw_extractions`` frame. Raises :class:`ExtractionError` when there was at least
    one chunk and every chunk's first pass failed (§3.5: an outage is never an empty corpus).
    """
    items = list(chunks.iter_rows(named=True))
    with ThreadPoolExecutor(max_workers=max(1, settings.concurrency)) as pool:
        results = list(pool.map(lambda c: extract_chunk(c, client, settings), items))
    rows = [r for rs in results for r in rs]
    frame = pl.DataFrame(rows, schema=RAW_SCHEMA)
    firsts = frame.filter(pl.col("pass") == 0)
    if items and firsts.filter(pl.col("parse_status") == "ok").height == 0:
        errors = firsts["error"].drop_nulls().head(3).to_list()
        raise ExtractionError(f"every one of {len(items)} chunk(s) failed extraction; first errors: {errors}")
    return frame
