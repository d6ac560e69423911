"""Paragraph chunker with sentence-aligned overlap (paper §4.1), and the span helpers every built-in
chunker cuts with.

Every chunk is a contiguous substring of its document: chunkers compute spans — ``[start, end)``
character offsets (Python string indices, i.e. code points) into the document's text — and cut the
text there, so a chunk can be cited by its offsets. Nothing is re-joined with a separator of our own.

Frame ``chunks``: doc_key, chunk_index (int, 0-based within the document), title, source,
doc_order, text (str), content_hash (SHA-256 hex of text), doc_hash.
"""

from __future__ import annotations

import hashlib
import re

import polars as pl

CHUNK_COLUMNS = ["doc_key", "chunk_index", "title", "source", "doc_order", "text", "content_hash", "doc_hash"]
CHUNK_SCHEMA = {c: pl.Int64 if c in ("chunk_index", "doc_order") else pl.String for c in CHUNK_COLUMNS}
"""The dtypes of :data:`CHUNK_COLUMNS`."""
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")  # a line holding only whitespace (tolerates \r of CRLF)

Span = tuple[int, int]
"""``[start, end)`` character offsets into a document's text."""


def strip_span(text: str, start: int, end: int) -> Span | None:
    """``[start, end)`` narrowed past surrounding whitespace, or None when nothing is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def paragraph_spans(text: str, start: int, end: int) -> list[Span]:
    """Non-empty paragraphs of ``text[start:end]`` (separated by blank lines), stripped."""
    cuts = [start, *(at for m in _BLANK_LINE.finditer(text, start, end) for at in m.span()), end]
    return [span for a, b in zip(cuts[::2], cuts[1::2]) if (span := strip_span(text, a, b))]


def sentence_spans(text: str, start: int, end: int) -> list[Span]:
    """Sentences of ``text[start:end]``: cut after ., ! or ? (and closing quotes or brackets) followed
    by whitespace; each span stripped, keeping its punctuation."""
    piece = text[start:end]  # searched on its own: a sentence end before ``start`` is not seen
    cuts = [0, *(m.end() for m in _SENTENCE_END.finditer(piece)), len(piece)]
    spans = (strip_span(piece, a, b) for a, b in zip(cuts, cuts[1:]))
    return [(start + span[0], start + span[1]) for span in spans if span]


def split_sentences(text: str) -> list[str]:
    """Split prose at sentence ends (., ! or ? followed by whitespace); pieces keep their punctuation."""
    return [text[a:b] for a, b in sentence_spans(text, 0, len(text))]


def hard_spans(text: str, start: int, end: int, max_chars: int) -> list[Span]:
    """Cut one over-long sentence ``text[start:end]`` into pieces of ≤ ``max_chars`` characters, at the
    last space or line break in the second half of each piece, else at exactly ``max_chars`` (text
    with no whitespace — a URL, CJK without punctuation — is split at the size limit)."""
    cuts = [start]
    while end - cuts[-1] > max_chars:
        limit = cuts[-1] + max_chars
        cut = max(text.rfind(" ", cuts[-1], limit + 1), text.rfind("\n", cuts[-1], limit + 1))
        cuts.append(cut if cut > cuts[-1] + max_chars // 2 else limit)
    cuts.append(end)
    return [span for a, b in zip(cuts, cuts[1:]) if (span := strip_span(text, a, b))]


def _units(text: str, budget: int) -> list[Span]:
    """Paragraphs, with any paragraph over ``budget`` characters split into sentence runs (an
    over-long sentence into :func:`hard_spans` pieces, each its own unit but the last)."""
    units: list[Span] = []
    for ps, pe in paragraph_spans(text, 0, len(text)):
        if pe - ps <= budget:
            units.append((ps, pe))
            continue
        run: Span | None = None
        for ss, se in sentence_spans(text, ps, pe):
            if se - ss > budget:
                pieces = hard_spans(text, ss, se, budget)
                if run:
                    units.append(run)
                units.extend(pieces[:-1])
                run = pieces[-1]
            elif run and se - run[0] > budget:
                units.append(run)
                run = (ss, se)
            else:
                run = (run[0], se) if run else (ss, se)
        if run:
            units.append(run)
    return units


def _overlap_start(text: str, chunk: Span, overlap: int) -> int | None:
    """Where the overlap carried out of ``chunk`` starts: within its last ``overlap`` characters, at
    the first sentence start; None when there is none (or no overlap)."""
    start, end = chunk
    if overlap <= 0 or end - start <= overlap:
        return None
    m = _SENTENCE_END.search(text[end - overlap : end])
    if m and m.end() < overlap:
        span = strip_span(text, end - overlap + m.end(), end)
        return span[0] if span else None
    return None


def chunk_spans(text: str, *, chunk_chars: int, overlap_chars: int) -> list[Span]:
    """The chunks of ``text`` as spans: whole paragraphs packed up to ``chunk_chars`` characters, up to
    ``overlap_chars`` carried forward (paper §4.1).

    A chunk runs from its first unit's start to its last unit's end, so it holds the document's own
    separators; its length counts them. The overlap is the end of the previous chunk from its first
    sentence start within the last ``overlap_chars`` characters (so it reads as prose), and the next
    chunk is the document from there on. Every span is non-empty and stripped; a chunk exceeds
    ``chunk_chars`` only by its carried overlap; a paragraph longer than ``chunk_chars`` is split at
    sentence ends, a sentence longer than that at whitespace, else at exactly ``chunk_chars``.
    """
    chunks: list[Span] = []
    current: Span | None = None
    carried = 0
    for us, ue in _units(text, chunk_chars):
        if current and ue - current[0] > chunk_chars + carried:
            chunks.append(current)
            tail = _overlap_start(text, current, overlap_chars)
            current, carried = ((tail, ue), us - tail) if tail is not None else ((us, ue), 0)
        else:
            current = (current[0], ue) if current else (us, ue)
    if current:
        chunks.append(current)
    return chunks


def chunk_text(text: str, *, chunk_chars: int, overlap_chars: int) -> list[str]:
    """The texts of :func:`chunk_spans` — each a contiguous substring of ``text``."""
    return [text[a:b] for a, b in chunk_spans(text, chunk_chars=chunk_chars, overlap_chars=overlap_chars)]


def chunk_documents(documents: pl.DataFrame, *, chunk_chars: int, overlap_chars: int) -> pl.DataFrame:
    """Split every row of a ``documents`` frame into the ``chunks`` frame (columns above)."""
    rows = []
    for doc in documents.iter_rows(named=True):
        for i, piece in enumerate(
            chunk_text(doc["text"], chunk_chars=chunk_chars, overlap_chars=overlap_chars)
        ):
            rows.append(
                {
                    "doc_key": doc["doc_key"],
                    "chunk_index": i,
                    "title": doc["title"],
                    "source": doc["source"],
                    "doc_order": doc["doc_order"],
                    "text": piece,
                    "content_hash": hashlib.sha256(piece.encode("utf-8")).hexdigest(),
                    "doc_hash": doc["doc_hash"],
                }
            )
    return pl.DataFrame(rows, schema=dict(CHUNK_SCHEMA))


def assemble_chunks(
    documents: pl.DataFrame, pieces: pl.DataFrame, *, operator: str = "paragraph_pack"
) -> pl.DataFrame:
    """The stored ``chunks`` frame (columns above, plus ``metadata``) from a chunker's output.

    ``pieces`` is what a chunker operator returns (doc_key, chunk_index, text, metadata JSON or null);
    title, source, doc_order and doc_hash come from ``documents``, content_hash is computed, and the
    metadata is the document's with the chunk's keys over it, plus ``char_start``/``char_end``: the
    chunk's ``[start, end)`` character offsets in its document's text, so it can be cited (every
    built-in chunker cuts substrings; a user chunker's chunk that is not one gets no offsets). Rows in
    document order, then chunk index.

    Raises :class:`ContractError` (naming ``operator``, the chunker) when a piece names a document that
    was not given, or a document with text got no chunk (it would be removed from the index).
    """
    import json

    from pgrag_dag.errors import ContractError

    label = f"ChunkerOutputContract (operator {operator})"
    strays = pieces.filter(~pl.col("doc_key").is_in(documents["doc_key"].implode()))
    if strays.height:
        raise ContractError(
            label,
            f"chunks of {strays['doc_key'].n_unique()} unknown document(s), e.g. {strays['doc_key'][0]!r}",
            strays.select("doc_key", "chunk_index"),
        )
    lost = documents.filter(
        (pl.col("text").str.strip_chars().str.len_chars() > 0)
        & ~pl.col("doc_key").is_in(pieces["doc_key"].implode())
    )
    if lost.height:
        raise ContractError(
            label,
            f"no chunk for {lost.height} document(s) with text, e.g. {lost['doc_key'][0]!r} "
            "(nothing is removed from the index by a chunker)",
            lost.select("doc_key"),
        )
    doc_meta = dict(zip(documents["doc_key"].to_list(), documents["metadata"].to_list()))
    doc_text = dict(zip(documents["doc_key"].to_list(), documents["text"].to_list()))
    cursor: dict[str, int] = {}
    metas: list[str | None] = []
    pieces = pieces.sort("doc_key", "chunk_index")
    for doc_key, text, chunk_meta in pieces.select("doc_key", "text", "metadata").iter_rows():
        meta = {**json.loads(doc_meta.get(doc_key) or "{}"), **json.loads(chunk_meta or "{}")}
        span = locate(doc_text.get(doc_key) or "", text, meta.get("char_start"), cursor.get(doc_key, 0))
        for key in ("char_start", "char_end"):
            meta.pop(key, None)
        if span is not None:
            meta |= {"char_start": span[0], "char_end": span[1]}
            cursor[doc_key] = span[0] + 1
        metas.append(
            json.dumps(meta, ensure_ascii=False) if meta or chunk_meta is not None else doc_meta.get(doc_key)
        )

    docs = documents.select("doc_key", "title", "source", "doc_order", "doc_hash")
    out = pieces.select("doc_key", "chunk_index", "text").with_columns(
        metadata=pl.Series(metas, dtype=pl.String)
    )
    out = out.join(docs, on="doc_key", how="left").with_columns(
        content_hash=pl.col("text").map_elements(
            lambda t: hashlib.sha256(t.encode("utf-8")).hexdigest(), return_dtype=pl.String
        )
    )
    return out.sort("doc_order", "doc_key", "chunk_index").select(*CHUNK_COLUMNS, "metadata")


def locate(document: str, chunk: str, start: object, cursor: int) -> Span | None:
    """Where ``chunk`` lies in ``document``: at ``start`` when the chunker said so truly, else its first
    occurrence at or after ``cursor`` (the previous chunk's start), else anywhere; None when it is not a
    contiguous substring (a chunker that re-joins text)."""
    if isinstance(start, int) and not isinstance(start, bool) and document.startswith(chunk, start):
        return start, start + len(chunk)
    at = document.find(chunk, cursor)
    at = at if at >= 0 else document.find(chunk)
    return (at, at + len(chunk)) if at >= 0 and chunk else None


_WRAPPED = re.compile(r"(?m)^(.{40,}[^.!?:;\s])[ \t]*\n(?=[ \t]*\S)")
"""A line of prose (40 characters or more, not ending a sentence) then a non-blank line: a hard wrap."""


def unwrap_hard_wraps(text: str) -> str:
    """``text`` with hard-wrapped prose lines joined by a space (novels, e-mails and plain-text filings wrap
    at ~70 columns), so that a sentence spanning lines splits as one sentence, not as its fragments; short
    lines (headings, list items), lines ending a sentence and paragraph breaks stay as they are."""
    return _WRAPPED.sub(r"\1 ", text)
