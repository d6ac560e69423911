"""Reading a model's reply: the one JSON object in a response, and how to evict a replayed response
that is unusable (paper §3.5, §4.2). Shared by extraction, supersession and community reports."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pgrag_dag.providers.llm import Completion
from pgrag_dag.storable import clean_json, clean_text

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def parse_json_object(
    text: str, *, lone_surrogates: Literal["replace", "keep"] = "replace"
) -> dict[str, Any]:
    """Parse the one JSON object in a model response.

    Accepts the object bare, inside a code fence, after leading prose, or with trailing commas. Every
    string in it (object keys too) comes back storable (issue 13): NUL (``\u0000``) removed, and a lone
    surrogate (``\ud800``) replaced by U+FFFD — or, with ``lone_surrogates="keep"``, left for the caller
    to refuse (:func:`parse_extraction`).
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
    if lone_surrogates == "keep":
        return clean_json(obj, lambda s: s.replace("\x00", ""))
    return clean_json(obj, lambda s: clean_text(s)[0])


def evict_hint(completion: Completion) -> str:
    """What an error about an unusable response adds: for a replayed one (kept in the cache, unlike a
    live model's, which is forgotten at once) how to evict it; else ``""``."""
    if not completion.replayed or not completion.prompt_key:
        return ""
    pk = completion.prompt_key[:16]
    return f" (replayed response to prompt {pk}; `pgrag cache evict --prompt-key {pk}` removes it)"
