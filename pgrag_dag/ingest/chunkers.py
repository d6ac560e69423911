"""Built-in chunker operators: token windows, Markdown/MediaWiki sections, paragraphs (paper §4.1).

Every chunker is a pure function ``fn(documents, options) -> chunks`` (no I/O). ``documents`` has at
least ``doc_key`` and ``text`` (String; null text = empty document; other columns are ignored).
``chunks`` has exactly :data:`CHUNKER_OUTPUT_SCHEMA`: doc_key (String), chunk_index (Int64, 0-based,
contiguous per document), text (String, non-empty) and metadata (String: a JSON object), rows in
input document order, then chunk order. A chunk's text is always a contiguous substring of its
document, surrounding whitespace stripped, and its metadata holds where: ``char_start`` and
``char_end``, the ``[start, end)`` character offsets (code points) into the document's text; an empty
or blank document yields no rows. Options are
pydantic models forbidding unknown fields: a bad value raises :class:`pydantic.ValidationError`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

from pgrag_dag.ingest.splitting import (
    Span,
    chunk_spans,
    hard_spans,
    paragraph_spans,
    sentence_spans,
    strip_span,
)

CHUNKER_OUTPUT_SCHEMA: dict[str, Any] = {
    "doc_key": pl.String,
    "chunk_index": pl.Int64,
    "text": pl.String,
    "metadata": pl.String,
}

Chunk = tuple[Span, dict[str, Any]]  # a chunk's span and its metadata

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+$")
_MEDIAWIKI = re.compile(r"^(={1,6})[ \t]*([^=].*?)[ \t]*\1[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_MAX_GROUP_TOKENS = 8  # tokens one character's UTF-8 bytes may be spread over before we give up


class TokenWindowOptions(BaseModel):
    """Options of :func:`token_window_chunks`.

    Attributes:
        tokens: window size, in tokens of ``tokenizer_model`` (≥ 1; default 600).
        overlap_tokens: tokens shared by consecutive windows (≥ 0 and < ``tokens``; default 100).
        tokenizer_model: model name whose tokenizer litellm selects (default ``"gpt-4o"``).
    """

    model_config = ConfigDict(extra="forbid")

    tokens: int = Field(default=600, ge=1, description="window size in tokens")
    overlap_tokens: int = Field(default=100, ge=0, description="tokens shared by consecutive windows")
    tokenizer_model: str = Field(default="gpt-4o", min_length=1, description="litellm tokenizer model")

    @model_validator(mode="after")
    def _overlap_below_size(self) -> TokenWindowOptions:
        if self.overlap_tokens >= self.tokens:
            raise ValueError(f"overlap_tokens ({self.overlap_tokens}) must be < tokens ({self.tokens})")
        return self


class MarkdownHeadingOptions(BaseModel):
    """Options of :func:`markdown_heading_chunks`.

    Attributes:
        max_chars: longest chunk, in characters (≥ 200; default 2000). Longer sections are split
            at blank lines, over-long paragraphs at sentence ends, over-long sentences at a space.
    """

    model_config = ConfigDict(extra="forbid")

    max_chars: int = Field(default=2000, ge=200, description="longest chunk in characters")


class ParagraphOptions(BaseModel):
    """Options of :func:`paragraph_chunks`.

    Attributes:
        min_chars: shortest chunk, in characters (≥ 1; default 1 = never merge). A paragraph (or a
            run of merged paragraphs) shorter than this is merged into the next paragraph.
        max_chars: longest chunk, in characters (≥ 100 and > ``min_chars``; default 4000). Longer
            paragraphs are split at sentence ends (over-long sentences at a space).
    """

    model_config = ConfigDict(extra="forbid")

    min_chars: int = Field(default=1, ge=1, description="shortest chunk in characters")
    max_chars: int = Field(default=4000, ge=100, description="longest chunk in characters")

    @model_validator(mode="after")
    def _min_below_max(self) -> ParagraphOptions:
        if self.min_chars >= self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) must be < max_chars ({self.max_chars})")
        return self


def _bounded_spans(text: str, start: int, end: int, max_chars: int) -> list[Span]:
    """Split ``text[start:end]`` into spans of ≤ ``max_chars``, packing greedily.

    The units are paragraphs; a paragraph over the budget is replaced by its sentences, and a
    sentence over the budget by whitespace-cut pieces. Consecutive units are then packed into one
    span while the packed span (gaps included) stays within ``max_chars``.
    """
    if (whole := strip_span(text, start, end)) is None or whole[1] - whole[0] <= max_chars:
        return [whole] if whole else []
    units: list[Span] = []
    for ps, pe in paragraph_spans(text, *whole):
        if pe - ps <= max_chars:
            units.append((ps, pe))
            continue
        for ss, se in sentence_spans(text, ps, pe):
            units.extend(hard_spans(text, ss, se, max_chars))
    packed: list[Span] = []
    for us, ue in units:
        if packed and ue - packed[-1][0] <= max_chars:
            packed[-1] = (packed[-1][0], ue)
        else:
            packed.append((us, ue))
    return packed


def _frame(documents: pl.DataFrame, per_document: Callable[[str, str], Iterator[Chunk]]) -> pl.DataFrame:
    """Run ``per_document(doc_key, text)`` over every row and build the output frame."""
    if missing := {"doc_key", "text"} - set(documents.columns):
        raise ValueError(f"documents frame lacks column(s) {sorted(missing)}")
    rows: list[tuple[str, int, str, str]] = []
    for doc_key, text in documents.select("doc_key", "text").iter_rows():
        text = text or ""
        for index, ((start, end), meta) in enumerate(per_document(doc_key, text)):
            meta = {**meta, "char_start": start, "char_end": end}
            rows.append((doc_key, index, text[start:end], json.dumps(meta, ensure_ascii=False)))
    return pl.DataFrame(rows, schema=CHUNKER_OUTPUT_SCHEMA, orient="row")


def paragraph_pack_chunks(documents: pl.DataFrame, *, chunk_chars: int, overlap_chars: int) -> pl.DataFrame:
    """Whole paragraphs packed up to ``chunk_chars`` characters with up to ``overlap_chars`` carried
    forward from a sentence start (§4.1; :func:`pgrag_dag.ingest.splitting.chunk_spans`): the default chunker.

    Returns:
        Frame of :data:`CHUNKER_OUTPUT_SCHEMA`; metadata ``{"char_start": a, "char_end": b}`` only.

    Raises:
        ValueError: a frame without ``doc_key``/``text``.
    """
    return _frame(
        documents,
        lambda doc_key, text: (
            (span, {}) for span in chunk_spans(text, chunk_chars=chunk_chars, overlap_chars=overlap_chars)
        ),
    )


def _lossy(doc_key: str, detail: str) -> ValueError:
    return ValueError(
        f"document {doc_key!r}: tokens do not decode back to the text ({detail}); "
        "token windows need a tokenizer whose decoded tokens concatenate to the input"
    )


def _token_offsets(litellm: Any, tokenizer: Any, doc_key: str, text: str, ids: list[int]) -> list[int]:
    """Character offset at which each token starts, plus ``len(text)`` as a final entry.

    Tokens are decoded one by one and their lengths accumulated. A character whose UTF-8 bytes are
    spread over several tokens decodes only once the group is complete; every token in such a group
    is given the character's start offset.

    Raises:
        ValueError: (naming ``doc_key``) when the decoded tokens do not concatenate to ``text``.
    """
    offsets, pos, group = [0] * (len(ids) + 1), 0, 0
    for i in range(len(ids)):
        piece = litellm.decode(model="", tokens=ids[group : i + 1], custom_tokenizer=tokenizer)
        if not text.startswith(piece, pos):
            if "\ufffd" in piece and i - group < _MAX_GROUP_TOKENS:
                continue  # an incomplete UTF-8 sequence: wait for the next token
            raise _lossy(doc_key, f"at character {pos}: {piece!r} vs {text[pos : pos + 20]!r}")
        offsets[group : i + 1] = [pos] * (i + 1 - group)
        pos, group = pos + len(piece), i + 1
    if group != len(ids) or pos != len(text):
        raise _lossy(doc_key, f"decoded tokens cover {pos} of {len(text)} characters")
    offsets[len(ids)] = len(text)
    return offsets


def token_window_chunks(documents: pl.DataFrame, options: TokenWindowOptions) -> pl.DataFrame:
    """Fixed windows of ``options.tokens`` tokens overlapping by ``options.overlap_tokens`` (§4.1).

    Each document is encoded with litellm's tokenizer for ``options.tokenizer_model`` (``n``
    tokens). A window covers tokens ``[start, min(start + tokens, n))`` and the next one starts
    ``overlap_tokens`` before it ends, so consecutive windows share exactly ``overlap_tokens``
    tokens; the last window is the first one reaching token ``n`` and may be shorter. Token
    boundaries are mapped to character offsets (each token decoded, lengths accumulated) and the
    original text is cut there and stripped — text is never re-assembled from decoded slices.
    Stripping can change how the window's first word tokenizes (``" examining"`` is one token,
    ``"examining"`` two), so a window whose text re-encodes to more than ``tokens`` tokens is
    shortened at its end until it fits (windows of 1 + ``overlap_tokens`` tokens are kept as they
    are). A window that is only whitespace is skipped (chunk_index stays contiguous).

    Args:
        documents: frame with ``doc_key`` and ``text`` (module docstring).
        options: :class:`TokenWindowOptions`.

    Returns:
        Frame of :data:`CHUNKER_OUTPUT_SCHEMA`; metadata ``{"token_start": i, "token_end": j}``,
        the window's half-open token range in the document's encoding (before stripping).

    Raises:
        ValueError: a document whose tokens do not decode back to its text (names the doc_key),
            or a frame without ``doc_key``/``text``.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm  # lazy: importing litellm takes seconds
    from litellm.utils import select_tokenizer

    tokenizer = select_tokenizer(model=options.tokenizer_model)  # resolved once, not per token

    def windows(doc_key: str, text: str) -> Iterator[Chunk]:
        if not text.strip():
            return
        ids = list(litellm.encode(model=options.tokenizer_model, text=text, custom_tokenizer=tokenizer))
        offsets = _token_offsets(litellm, tokenizer, doc_key, text, ids)
        start = 0
        while True:
            end = min(start + options.tokens, len(ids))
            span = strip_span(text, offsets[start], offsets[end])
            while (
                span is not None
                and end > start + options.overlap_tokens + 1
                and options.tokens
                < len(litellm.encode(model="", text=text[span[0] : span[1]], custom_tokenizer=tokenizer))
            ):
                end -= 1  # stripping changed the tokenization: shorten the window by a token
                span = strip_span(text, offsets[start], offsets[end])
            if span is not None:
                yield span, {"token_start": start, "token_end": end}
            if end >= len(ids):
                return
            start = end - options.overlap_tokens

    return _frame(documents, windows)


def _heading(line: str) -> tuple[int, str] | None:
    """``(level, title)`` when ``line`` is an ATX (``## T``) or MediaWiki (``== T ==``) heading."""
    if m := _ATX.match(line):
        title = _ATX_CLOSING.sub("", m.group(2) or "").strip()
        return len(m.group(1)), title
    if m := _MEDIAWIKI.match(line):
        return len(m.group(1)), m.group(2).strip()
    return None


def _sections(text: str) -> Iterator[tuple[Span, str, int]]:
    """``(body span, section path, heading level)`` per section; the preamble has ``("", 0)``.

    Lines inside fenced code blocks (````` ``` ````` or ``~~~``) are never headings.
    """
    path: list[tuple[int, str]] = []
    body_start, section, level = 0, "", 0
    fence: str | None = None
    line_start = 0
    for raw in text.split("\n"):
        line_end = line_start + len(raw)
        line = raw.rstrip("\r")
        if m := _FENCE.match(line):
            marker = m.group(1)
            if fence is None:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = None
        elif fence is None and (found := _heading(line)) is not None:
            yield (body_start, line_start), section, level
            level, title = found
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, title))
            section = " > ".join(t for _, t in path)
            body_start = min(line_end + 1, len(text))
        line_start = line_end + 1
    yield (body_start, len(text)), section, level


def markdown_heading_chunks(documents: pl.DataFrame, options: MarkdownHeadingOptions) -> pl.DataFrame:
    """One chunk per heading section, sections over ``options.max_chars`` split further (§4.1).

    Headings are Markdown ATX lines (``#`` .. ``######`` then a space or end of line, optional
    closing ``#``s, up to 3 leading spaces) and MediaWiki lines (``== Title ==``, level = number of
    ``=``; the Wikipedia corpus uses them), outside fenced code blocks; CRLF and LF both work. A
    chunk is a section's *body*: the heading line itself is not included (its title is in the
    metadata). Text before the first heading is the preamble section. A section with an empty body
    produces no chunk but still updates the heading path. A body longer than ``max_chars`` is split
    at blank lines, over-long paragraphs at sentence ends, over-long sentences at a space, then
    packed greedily up to ``max_chars`` (see :func:`_bounded_spans`).

    Args:
        documents: frame with ``doc_key`` and ``text`` (module docstring).
        options: :class:`MarkdownHeadingOptions`.

    Returns:
        Frame of :data:`CHUNKER_OUTPUT_SCHEMA`; metadata ``{"section": path, "heading_level": n}``
        where ``path`` joins the titles of the enclosing headings with ``" > "`` (e.g. ``"Early
        life > Education"``) and ``n`` is the level of the section's own heading; the preamble
        has ``{"section": "", "heading_level": 0}``.

    Raises:
        ValueError: a frame without ``doc_key``/``text``.
    """

    def per_document(doc_key: str, text: str) -> Iterator[Chunk]:
        for (start, end), section, level in _sections(text):
            for span in _bounded_spans(text, start, end, options.max_chars):
                yield span, {"section": section, "heading_level": level}

    return _frame(documents, per_document)


def paragraph_chunks(documents: pl.DataFrame, options: ParagraphOptions) -> pl.DataFrame:
    """One chunk per paragraph (§4.1).

    Paragraphs are separated by blank lines (lines holding only whitespace; CRLF-tolerant) and are
    numbered 0, 1, ... per document. A paragraph shorter than ``options.min_chars`` is merged into
    the next one (the chunk then spans both, blank line included), repeatedly while the run stays
    short; a short run at the end of the document is merged into the previous chunk instead. A
    chunk longer than ``options.max_chars`` is split at sentence ends (over-long sentences at a
    space) and packed greedily up to ``max_chars``; all its pieces carry the same paragraph number.

    Args:
        documents: frame with ``doc_key`` and ``text`` (module docstring).
        options: :class:`ParagraphOptions`.

    Returns:
        Frame of :data:`CHUNKER_OUTPUT_SCHEMA`; metadata ``{"paragraph": k}``, the index of the
        chunk's first source paragraph.

    Raises:
        ValueError: a frame without ``doc_key``/``text``.
    """

    def per_document(doc_key: str, text: str) -> Iterator[Chunk]:
        groups: list[tuple[int, int, int]] = []  # (first paragraph, start, end)
        first: tuple[int, int] | None = None
        for k, (start, end) in enumerate(paragraph_spans(text, 0, len(text))):
            first = first or (k, start)
            if end - first[1] >= options.min_chars:
                groups.append((first[0], first[1], end))
                first = None
        if first is not None:  # a short run at the very end joins the previous chunk, if any
            k, start = groups.pop()[:2] if groups else first
            groups.append((k, start, len(text)))
        for k, start, end in groups:
            for span in _bounded_spans(text, start, end, options.max_chars):
                yield span, {"paragraph": k}

    return _frame(documents, per_document)
