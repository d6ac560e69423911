"""Text the offline extractors do not read (§4.1): what a document carries besides its own content.

- **Project Gutenberg's header and footer**: everything before the ``*** START OF THE/THIS PROJECT GUTENBERG
  EBOOK … ***`` line (the licence preamble, title page data), the producers' credit right after it
  ("Produced by John P. Roberts III, Roger Labbe, …"), and everything from the ``*** END OF …`` line on (the
  licence: "Project Gutenberg Literary Archive Foundation", "Section 1", …) — names of no one in the book;
- **stage directions**: a line that is only a parenthesis, as a transcript marks the operator's turns
  ("(Operator Direction.)", "(Break for direction.)").

Blanked text is replaced by spaces, one for one (line breaks kept), so every offset into a chunk still holds.
A document without the Gutenberg markers keeps all its text but its stage directions.
"""

from __future__ import annotations

import re

GUTENBERG_START = re.compile(
    r"\*\*\*\s*START OF (?:THE|THIS) PROJECT GUTENBERG E-?BOOK[^*]*(?:\*\*\*)?", re.I
)
GUTENBERG_END = re.compile(r"\*\*\*\s*END OF (?:THE|THIS) PROJECT GUTENBERG E-?BOOK", re.I)
"""Project Gutenberg's markers around a book's own text (the start line may wrap before its ``***``)."""
CREDITS = re.compile(r"\A\s*(?:Produced|Prepared|Transcribed|Created) by\b[^\n]*(?:\n[ \t]*\S[^\n]*)*", re.I)
"""The producers' credit opening a Gutenberg text: its paragraph (up to a blank line)."""
STAGE_DIRECTION = re.compile(r"^[ \t]*\([^()\n]{1,80}\)[ \t]*$", re.M)
"""A line that is only a short parenthesis: a transcript's stage direction, no one's words."""


def _blank(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def readable_texts(texts: list[str]) -> list[str]:
    """A document's chunk texts (in order) with the Gutenberg header, credit and footer and the stage
    directions blanked (see the module); same lengths as ``texts``. The header runs to the first chunk naming
    the start marker, the footer from the first chunk naming the end marker (overlapping chunks may name a
    marker twice)."""
    starts = [GUTENBERG_START.search(t or "") for t in texts]
    first = next((n for n, m in enumerate(starts) if m is not None), None)
    out: list[str] = []
    ended = False
    for n, text in enumerate(texts):
        text = text or ""
        if ended or (first is not None and n < first):
            out.append(_blank(text))
            continue
        start = starts[n]
        if start is not None:
            body = text[start.end() :]
            credit = CREDITS.match(body)
            cut = start.end() + (credit.end() if credit else 0)
            text = _blank(text[:cut]) + text[cut:]
        end = GUTENBERG_END.search(text)
        if end is not None:
            text = text[: end.start()] + _blank(text[end.start() :])
            ended = True
        out.append(STAGE_DIRECTION.sub(lambda m: _blank(m.group(0)), text))
    return out
