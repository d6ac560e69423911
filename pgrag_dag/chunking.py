"""Paragraph chunker with sentence-aligned overlap (paper §4.1).

Frame ``chunks``: doc_key, chunk_index (int, 0-based within the document), title, source,
doc_order, text (str), content_hash (SHA-256 hex of text), doc_hash.
"""

from __future__ import annotations

import hashlib
import re

import polars as pl

CHUNK_COLUMNS = ["doc_key", "chunk_index", "title", "source", "doc_order", "text", "content_hash", "doc_hash"]
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")


def split_sentences(text: str) -> list[str]:
    """Split prose at sentence ends (., ! or ? followed by whitespace); pieces keep their punctuation."""
    parts, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        parts.append(text[start : m.end()].strip())
        start = m.end()
    if start < len(text):
        parts.append(text[start:].strip())
    return [p for p in parts if p]


def _units(text: str, budget: int) -> list[str]:
    """Paragraphs, with any paragraph over ``budget`` characters split into sentence runs."""
    units: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        para = para.strip()
        if not para:
            continue
        if len(para) <= budget:
            units.append(para)
            continue
        run = ""
        for sent in split_sentences(para):
            while len(sent) > budget:  # a single over-long sentence: hard split at a space
                cut = sent.rfind(" ", 0, budget)
                cut = cut if cut > budget // 2 else budget
                if run:
                    units.append(run)
                    run = ""
                units.append(sent[:cut].strip())
                sent = sent[cut:].strip()
            if run and len(run) + 1 + len(sent) > budget:
                units.append(run)
                run = sent
            else:
                run = f"{run} {sent}".strip()
        if run:
            units.append(run)
    return units


def _overlap_tail(chunk: str, overlap: int) -> str:
    """The last ``overlap`` characters of ``chunk``, advanced to the next sentence start."""
    if overlap <= 0 or len(chunk) <= overlap:
        return ""
    tail = chunk[-overlap:]
    m = _SENTENCE_END.search(tail)
    if m and m.end() < len(tail):
        return tail[m.end() :].strip()
    return ""


def chunk_text(text: str, *, chunk_chars: int, overlap_chars: int) -> list[str]:
    """Pack whole paragraphs up to ``chunk_chars`` characters; carry up to ``overlap_chars`` forward.

    The overlap resumes at a sentence boundary so it reads as prose. Every returned chunk is
    non-empty; a chunk exceeds ``chunk_chars`` only by its carried overlap.
    """
    chunks: list[str] = []
    current, carried = "", 0
    for unit in _units(text, chunk_chars):
        if current and len(current) + 2 + len(unit) > chunk_chars + carried:
            chunks.append(current)
            tail = _overlap_tail(current, overlap_chars)
            current = f"{tail}\n\n{unit}" if tail else unit
            carried = len(tail) + 2 if tail else 0
        else:
            current = f"{current}\n\n{unit}" if current else unit
    if current.strip():
        chunks.append(current)
    return chunks


def chunk_documents(documents: pl.DataFrame, *, chunk_chars: int, overlap_chars: int) -> pl.DataFrame:
    """Split every row of a ``documents`` frame into the ``chunks`` frame (columns above)."""
    rows = []
    for doc in documents.iter_rows(named=True):
        for i, piece in enumerate(chunk_text(doc["text"], chunk_chars=chunk_chars, overlap_chars=overlap_chars)):
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
    schema = {c: pl.Int64 if c in ("chunk_index", "doc_order") else pl.String for c in CHUNK_COLUMNS}
    return pl.DataFrame(rows, schema=schema)


def assemble_chunks(documents: pl.DataFrame, pieces: pl.DataFrame, *, operator: str = "paragraph_pack") -> pl.DataFrame:
    """The stored ``chunks`` frame (columns above, plus ``metadata``) from a chunker's output.

    ``pieces`` is what a chunker operator returns (doc_key, chunk_index, text, metadata JSON or null);
    title, source, doc_order and doc_hash come from ``documents``, content_hash is computed, and the
    metadata is the document's with the chunk's keys over it. Rows in document order, then chunk index.

    Raises :class:`ContractError` (naming ``operator``, the chunker) when a piece names a document that
    was not given, or a document with text got no chunk (it would be removed from the index).
    """
    import json

    from pgrag_dag.errors import ContractError

    label = f"ChunkerOutputContract (operator {operator})"
    strays = pieces.filter(~pl.col("doc_key").is_in(documents["doc_key"].implode()))
    if strays.height:
        raise ContractError(label, f"chunks of {strays['doc_key'].n_unique()} unknown document(s), "
                            f"e.g. {strays['doc_key'][0]!r}", strays.select("doc_key", "chunk_index"))
    lost = documents.filter((pl.col("text").str.strip_chars().str.len_chars() > 0)
                            & ~pl.col("doc_key").is_in(pieces["doc_key"].implode()))
    if lost.height:
        raise ContractError(label, f"no chunk for {lost.height} document(s) with text, e.g. {lost['doc_key'][0]!r} "
                            "(nothing is removed from the index by a chunker)", lost.select("doc_key"))
    doc_meta = dict(zip(documents["doc_key"].to_list(), documents["metadata"].to_list()))

    def merged(doc_key: str, chunk_meta: str | None) -> str | None:
        if chunk_meta is None:
            return doc_meta.get(doc_key)
        return json.dumps({**json.loads(doc_meta.get(doc_key) or "{}"), **json.loads(chunk_meta)}, ensure_ascii=False)

    docs = documents.select("doc_key", "title", "source", "doc_order", "doc_hash")
    out = pieces.select("doc_key", "chunk_index", "text", "metadata").join(docs, on="doc_key", how="left")
    out = out.with_columns(
        content_hash=pl.col("text").map_elements(lambda t: hashlib.sha256(t.encode("utf-8")).hexdigest(), return_dtype=pl.String),
        metadata=pl.struct("doc_key", "metadata").map_elements(lambda r: merged(r["doc_key"], r["metadata"]),
                                                               return_dtype=pl.String, skip_nulls=False),
    )
    return out.sort("doc_order", "doc_key", "chunk_index").select(*CHUNK_COLUMNS, "metadata")
