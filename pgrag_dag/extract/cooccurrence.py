"""Offline extraction: proper-noun phrases and sentence co-occurrence, no model (paper §4.1, §4.3).

The GraphRAG "fast" (NLP) indexing style: instead of asking a chat model, every chunk is read with
regular expressions (no POS tagger is available offline). Its output is the ``raw_extractions``
frame of :mod:`pgrag_dag.extract.model_extraction` (``RAW_SCHEMA``, one row per chunk, ``pass`` 0, model
``offline-cooccurrence``), so it goes through the same gates (§4.3) and the same downstream stages as
an LLM extraction. It is deterministic: the same chunks and options give byte-identical output.

Entities — proper-noun phrases, found per sentence (a chunk's lines, each split with
:func:`pgrag_dag.ingest.splitting.split_sentences`, after footnote markers such as ``[12]`` are removed; a
split after an abbreviation or an initial such as ``Dr.`` / ``J.`` / ``c.`` is undone, a space missing
after a full stop, ``computer.Babbage``, restored; a heading line is a sentence of its own):

* a phrase is a run of capitalised words (``Ada Lovelace``; all-caps words and acronyms such as
  ``IBM`` count; a hyphenated word counts when every part is capitalised, so ``Jean-Baptiste`` does
  and ``Turing-complete`` does not; ``d'Artagnan`` does; a double hyphen is a dash, no part of a word),
  with abbreviations and initials (``Dr.``, ``St.``, ``J.``) and the lowercase connectors
  :data:`CONNECTORS` (``of``, ``de``, ``von``, ``van``, ``la``, ``du`` ...) inside it, and ``the`` only after
  ``of`` (``Bank of the United States``; so ``Boso the Elder`` is two phrases). ``and``/``&`` always end a
  phrase (the conjunction gate refuses such names). Numbers, punctuation, brackets and quotes end a phrase, so
  ``[12]`` or ``]]`` can never glue onto a name, and a possessive ``'s`` ends it and is dropped;
* function words (:data:`LEADING_STOP`: ``The``, ``In``, ``However``, ``He``, and the modal verbs and
  interjections that open questions and dialogue, ``Can``, ``Let``, ``Oh`` ...) are stripped from
  both ends, and so are a trailing month or ``No.`` (``Zuse Z3 May`` of a table row; a trailing
  ``I`` is kept as a numeral: ``Lothair I``); a phrase whose first word opens the sentence (no word
  before it) keeps that word only when it is also capitalised elsewhere in the chunk, not at a
  sentence start, or in the chunk's title — two adjacent capitalised words at a sentence start
  (``Charles Babbage was``) are kept, a single one (``Construction of ...``) or one glued on by a
  connector (``Parts of Babbage`` → ``Babbage``) is not; acronyms are exempt;
* dropped: pronouns, months and weekdays alone, nationality adjectives alone (``English``), names
  made only of abbreviations (``Co.``) or honorifics (``Sir``), names shorter than ``min_name_chars``
  characters or of more than ``max_name_words`` capitalised words (title-case headlines, table rows);
* the type is ``Organization`` when a word of :data:`ORG_WORDS` occurs in the name (``University``,
  ``Society``, ``Company``, ``Inc.``, ``Ltd`` ...), else ``Person`` when the name starts with an
  honorific of :data:`HONORIFICS` followed by a name (``Lord Byron``, ``Sir John Herschel``), else
  ``Concept``: no other cue is reliable without a tagger (``London`` stays a ``Concept``);
* one record per phrase per chunk (by :func:`pgrag_dag.gate_rules.identity_key`; the first surface form
  is kept), its description the first sentence naming it (≤ ``description_chars``);
* short forms, settled per document: a one-word name equal to the first or last word of exactly
  one person-like longer name of the document (2–4 capitalised words, no connector or organisation
  word: ``Babbage`` and ``Charles Babbage``, ``Ada`` and ``Ada Lovelace``) is that name's alias, not
  an entity of its own — its mentions count as the longer name's, in every chunk of the document; a
  short form two such names share names nothing (it cannot be told which); a word the document
  writes after "the" is a common noun, never a short form (``the Engine``), and neither is a word
  named on its own before the longer names appear (:data:`OWN_NAME_MENTIONS`).

Relations — for every unordered pair of distinct entities named in the same sentence (only the
first ``max_entities_per_sentence`` distinct ones of a sentence pair up, bounding the quadratic), one
triple per chunk: subject and object ordered by lowercase name (the same edge whatever the text's
order), ``options.predicate``, ``confidence = min(1, 0.5 + 0.25 * (n - 1))`` for the ``n`` sentences
of the chunk in which the pair co-occurs (never under the default gate floor 0.5), the first such
sentence as description, not negated, no validity period. Across chunks the relations stage weights
an edge by the number of distinct chunks that assert it: the co-occurrence count.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, field_validator

from pgrag_dag import progress
from pgrag_dag.errors import ExtractionError
from pgrag_dag.extract.boilerplate import readable_texts
from pgrag_dag.frames import RAW_SCHEMA
from pgrag_dag.gate_rules import PRONOUNS, VAGUE_PREDICATES, identity_key, normalise_predicate
from pgrag_dag.ingest.splitting import split_sentences

MODEL = "offline-cooccurrence"
"""The ``model`` column of every row this extractor writes."""

CONNECTORS = frozenset(
    {"of", "de", "du", "des", "da", "di", "del", "della", "der", "den", "von", "van", "la", "le", "les", "y"}
)
"""Lowercase words allowed inside a phrase, between capitalised words (``the`` too, after ``of``)."""

LEADING_STOP = frozenset(
    """
a an the this that these those some many most all both each every such other another any no not
in on at by for from to toward towards of with as into onto upon under over after before during between among
through throughout within without against about above below across along around beyond despite
however although though because but and or nor yet so if when whenever while whereas where since
until unless once then thus hence therefore also still later earlier meanwhile instead indeed today
according he she it they we i you his her hers its their our my your him them us me there here
who whom whose which what why how yes one was were is are be been has had have do does did like unlike
can could would should shall might must let oh ah alas pray well see
""".split()
)
"""Capitalised function words stripped from either end of a phrase (mostly sentence openers)."""

MONTHS_DAYS = frozenset(
    """
january february march april may june july august september october november december
monday tuesday wednesday thursday friday saturday sunday
""".split()
)
DEMONYMS = frozenset(
    """
english british scottish irish welsh french german italian spanish portuguese dutch belgian swiss
austrian russian polish greek roman latin european american canadian australian indian chinese
japanese arab arabic egyptian jewish christian catholic protestant
""".split()
)
"""Nationality and religion adjectives: dropped when they are the whole name (``English``)."""

HONORIFICS = frozenset(
    """
lord lady sir dame hon hon. dr dr. mr mr. mrs mrs. ms ms. miss madame monsieur professor prof. rev. reverend
m. mm. mme. mmes. mlle. mlles.
count countess baron baroness duke duchess earl king queen prince princess emperor empress pope
""".split()
)
"""First words that mark the rest of the name as a person (``Lord Byron``)."""

ORG_WORDS = frozenset(
    """
university college society company corporation corp corp. inc inc. ltd ltd. llc plc co. institute
institution academy association school
""".split()
)
"""Words that mark a name as an organisation (``Royal Society``, ``Praed's & Co.`` → ``Co.``)."""

_ABBREVIATIONS = frozenset(
    {
        "hon",
        "dr",
        "mr",
        "mrs",
        "ms",
        "st",
        "mt",
        "jr",
        "sr",
        "prof",
        "rev",
        "gen",
        "col",
        "capt",
        "lt",
        "inc",
        "ltd",
        "co",
        "corp",
        "bros",
        "no",
        "vol",
        "c",
        "ca",
        "vs",
        "etc",
        "fr",
        "mm",  # French honorifics: "MM. de Chalais", "Mme. Bonacieux", "Mlle. de Montalais"
        "mme",
        "mmes",
        "mlle",
        "mlles",
    }
)
_FOOTNOTE = re.compile(
    r"\[\s*(?:\d+|[a-z]|note\s*\d+|citation needed|clarification needed)\s*\]", re.IGNORECASE
)
_GLUED_SENTENCE = re.compile(r"(?<=[a-z]{2}[.!?])(?=[A-Z][a-z])")  # "computer.Babbage is": a missing space
_ENDS_ABBREVIATION = re.compile(
    r"(?:^|[\s(])(?:[A-Z]|Dr|Mr|Mrs|Ms|MM|Mme|Mmes|Mlle|Mlles|St|Mt|Jr|Sr|Prof|Rev|Hon|Gen|Col|Capt|Lt|c|ca|vs|No|Vol)\.$"
)
# "_" is not a word character; a double hyphen (a typewriter dash: "d’Artagnan--projects") is no word's part
_TOKEN = re.compile(r"[^\W\d_](?:[^\W_]|['’]|-(?!-))*\.?|\d[\w.,]*|\S")
_POSSESSIVE = re.compile(r"['’]s?$")
_SHOUTED_STOP = frozenset({"the", "a", "an", "in", "on", "at", "of", "to", "by", "for", "and", "or"})
_CONNECTOR_OR_THE = CONNECTORS | {"the"}
_TRAILING = MONTHS_DAYS | {"no", "vol", "c", "ca", "vs", "etc"}
OWN_NAME_MENTIONS = 2
"""Mentions of a one-word name before its longer names first appear that make it a name of its own (also
:func:`pgrag_dag.extract.nlp_names.settle_short_forms`): a text gives the full name first, then shortens it;
"Azure", said throughout a call, is not the "Azure Linux" of one answer. Two: a heading may come first."""
_WORD = 0  # token kinds
_OTHER = 1


class CooccurrenceOptions(BaseModel):
    """Options of :func:`extract_cooccurrence` (unknown keys are refused).

    ``predicate`` — the predicate of every triple; it must be its own
    :func:`~pgrag_dag.gate_rules.normalise_predicate` form and not in ``VAGUE_PREDICATES`` (the
    vague-predicate gate would refuse ``co_occurs_with``), and should not share token stems with a vocabulary
    term of the space (``Vocabulary.snap`` would rename it). ``max_entities_per_sentence`` — only a sentence's
    first N distinct entities pair up (≤ N(N-1)/2 pairs a sentence). ``min_name_chars`` — shorter names are
    dropped. ``max_name_words`` — a run of more capitalised words (connectors not counted) is not a name
    and is dropped. ``description_chars`` — descriptions are cut to this many characters (at a space).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    predicate: str = "co_occurs_in_sentence"
    max_entities_per_sentence: int = Field(default=12, ge=2)
    min_name_chars: int = Field(default=2, ge=1)
    max_name_words: int = Field(default=6, ge=1)
    description_chars: int = Field(default=300, ge=20)

    @field_validator("predicate")
    @classmethod
    def _predicate_survives_gates(cls, value: str) -> str:
        if not value or normalise_predicate(value) != value:
            raise ValueError(
                f"predicate {value!r} is not in normalised form ({normalise_predicate(value)!r})"
            )
        if value in VAGUE_PREDICATES:
            raise ValueError(f"predicate {value!r} is vague; the gates would refuse every triple")
        return value


def sentences_of(text: str) -> list[str]:
    """The sentences of one chunk, in order: footnote markers removed, each line split with
    :func:`split_sentences`, a split after an abbreviation or initial (``Dr.``, ``J.``, ``c.``) undone."""
    out: list[str] = []
    for line in _FOOTNOTE.sub("", text).splitlines():
        pieces = split_sentences(_GLUED_SENTENCE.sub(" ", line))
        merged: list[str] = []
        for piece in pieces:
            if merged and _ENDS_ABBREVIATION.search(merged[-1]):
                merged[-1] = f"{merged[-1]} {piece}"
            else:
                merged.append(piece)
        out.extend(merged)
    return out


def _capitalised(word: str) -> bool:
    if word[:1].isupper():
        return all(p[:1].isupper() or not p for p in word.split("-"))
    return len(word) > 2 and word[1] in "'’" and word[2:3].isupper() and word[0] in "dlDL"  # d'Artagnan


def _acronym(word: str) -> bool:
    letters = [c for c in word if c.isalpha()]
    return 2 <= len(letters) <= 6 and all(c.isupper() for c in letters) and word.isalnum()


def _tokens(sentence: str) -> list[tuple[int, str, int, int, bool]]:
    """(kind, word, start, end, ends_phrase) per token; a word's trailing ``.``/possessive is split off."""
    out: list[tuple[int, str, int, int, bool]] = []
    for m in _TOKEN.finditer(sentence):
        tok, start = m.group(), m.start()
        if not tok[0].isalpha():
            out.append((_OTHER, tok, start, m.end(), True))
            continue
        stop = False
        if tok.endswith("."):
            base = tok[:-1]
            if base.lower() in _ABBREVIATIONS or (len(base) == 1 and base.isupper()):
                out.append((_WORD, tok, start, m.end(), False))  # "Dr.", "St.", "J."
                continue
            tok, stop = base, True
        poss = _POSSESSIVE.search(tok)
        if poss and poss.start() > 0:  # "Babbage's", "Babbages'": the possessive ends the phrase
            tok, stop = tok[: poss.start()], True
        tok = tok.rstrip("-")
        out.append((_WORD, tok, start, start + len(tok), stop))
    return out


def _runs(tokens: list[tuple[int, str, int, int, bool]]) -> list[tuple[list[int], bool]]:
    """Candidate phrases of one sentence: (token indices, starts the sentence)."""
    runs: list[tuple[list[int], bool]] = []
    run: list[int] = []
    pending: list[int] = []
    seen_word = False
    initial = False

    def close() -> None:
        nonlocal run, pending
        if run:
            runs.append((run, initial))
        run, pending = [], []

    for i, (kind, word, _, _, stop) in enumerate(tokens):
        if kind == _WORD and word and _capitalised(word):
            if not run:
                initial = not seen_word
            run.extend(pending)
            pending = []
            run.append(i)
        elif (
            kind == _WORD
            and run
            and not stop
            and (word in CONNECTORS or (word == "the" and pending and tokens[pending[-1]][1] == "of"))
        ):
            pending.append(i)
        else:
            close()
        if kind == _WORD:
            seen_word = True
        if stop:
            close()
    close()
    return runs


def _strippable(word: str) -> bool:
    """A word to strip from either end of a phrase: a connector or a function word (in capitals only
    an article or preposition: ``US Navy`` keeps ``US``, ``THE ANALYTICAL ENGINE`` loses ``THE``)."""
    low = word.lower()
    if word in CONNECTORS:
        return True
    if low not in LEADING_STOP:
        return False
    return not (len(word) > 1 and word.isupper()) or low in _SHOUTED_STOP


def _entity_type(words: list[str]) -> str:
    low = [w.lower() for w in words]
    if any(w in ORG_WORDS for w in low):
        return "Organization"
    if len(low) >= 2 and low[0] in HONORIFICS:
        return "Person"
    return "Concept"


def clip_text(text: str, limit: int) -> str:
    """``text`` with its whitespace collapsed, cut to at most ``limit`` characters at a space."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > limit // 2 else limit].rstrip()


def _names(
    sentence: str,
    tokens: list[tuple[int, str, int, int, bool]],
    independent: set[str],
    options: CooccurrenceOptions,
) -> list[tuple[str, list[str]]]:
    """The entity names of one sentence in text order: (surface name, its words)."""
    found: list[tuple[str, list[str]]] = []
    for run, initial in _runs(tokens):
        while run and _strippable(tokens[run[0]][1]):
            run, initial = run[1:], False
        while (
            len(run) > 1
            and tokens[run[-1]][1] != "I"
            and (  # a trailing "I" is a numeral: "Lothair I"
                _strippable(tokens[run[-1]][1]) or tokens[run[-1]][1].lower().rstrip(".") in _TRAILING
            )
        ):
            run = run[:-1]  # "Charles Babbage A", "Zuse Z3 May", "Difference Engine No."
        if not run:
            continue
        first = tokens[run[0]][1]
        if initial and first not in independent and not _acronym(first):
            if len(run) == 1:
                continue
            if tokens[run[1]][1] in CONNECTORS:  # "Parts of Babbage" → "Babbage"
                run = run[1:]
                while run and tokens[run[0]][1] in _CONNECTOR_OR_THE:
                    run = run[1:]
        words = [tokens[i][1] for i in run]
        capitalised = [w for w in words if w not in _CONNECTOR_OR_THE]
        if not words or len(capitalised) > options.max_name_words or all(w.endswith(".") for w in words):
            continue  # too long for a name, or only abbreviations and initials ("Co.", "J.")
        name = " ".join(sentence[tokens[run[0]][2] : tokens[run[-1]][3]].split())
        low = name.lower()
        if len(name) < options.min_name_chars or low in PRONOUNS:
            continue
        if len(words) == 1 and (low in MONTHS_DAYS or low in DEMONYMS or low in HONORIFICS):
            continue
        found.append((name, words))
    return found


@dataclass
class _ChunkNames:
    """One chunk's names before short forms are settled: records by identity key, each name's words,
    and per sentence the keys it names (text order)."""

    entities: dict[str, dict[str, Any]]
    words_of: dict[str, list[str]]
    mentions: list[tuple[str, list[str]]]


def _chunk_names(text: str, title: str, options: CooccurrenceOptions) -> _ChunkNames:
    sentences = sentences_of(text or "")
    toks = [_tokens(s) for s in sentences]
    independent: set[str] = set()
    for kind, word, *_ in _tokens(title or ""):
        if kind == _WORD and word and _capitalised(word):
            independent.add(word)
    for sentence_tokens in toks:
        seen_word = False
        for kind, word, *_ in sentence_tokens:
            if kind != _WORD:
                continue
            if seen_word and word and _capitalised(word):
                independent.add(word)
            seen_word = True
    found = _ChunkNames({}, {}, [])
    for sentence, sentence_tokens in zip(sentences, toks):
        keys: list[str] = []
        for name, words in _names(sentence, sentence_tokens, independent, options):
            key = identity_key(name)
            if key not in found.entities:
                found.entities[key] = {
                    "name": name,
                    "type": _entity_type(words),
                    "description": clip_text(sentence, options.description_chars),
                    "aliases": [],
                }
                found.words_of[key] = words
            if key not in keys:
                keys.append(key)
        found.mentions.append((sentence, keys))
    return found


def _short_forms(chunks: list[_ChunkNames], text: str) -> tuple[dict[str, str], set[str]]:
    """A document's short forms: one-word names (identity key) → the one longer name of the document
    that begins or ends with that word, and the one-word names two or more longer names share.

    Only person-like longer names count (2–4 words, every one capitalised: no connector, no
    organisation word), a word the text ever writes after "the" is a common noun, never a short
    form ("the Engine" is not "Analytical Engine"), and a word named on its own in
    :data:`OWN_NAME_MENTIONS` sentences before any of its longer names is a name of its own ("Azure" in
    an earnings call that later says "Azure Linux" and "Azure Stack").
    """
    long_names: dict[str, list[str]] = {}
    single: set[str] = set()
    for chunk in chunks:
        for key, words in chunk.words_of.items():
            if len(words) == 1:
                single.add(key)
            elif (
                len(words) <= 4
                and all(_capitalised(w) for w in words)
                and not any(w.lower().rstrip(".") in ORG_WORDS for w in words)
            ):
                long_names.setdefault(key, words)
    ends: dict[str, list[str]] = {}
    for key, words in long_names.items():
        for w in dict.fromkeys((identity_key(words[0]), identity_key(words[-1]))):
            ends.setdefault(w, []).append(key)
    after_the = {m.lower() for m in re.findall(r"\bthe\s+([A-Z][\w'’\-]*)", text, flags=re.IGNORECASE)}
    at: dict[str, list[tuple[int, int]]] = {}  # key -> the (chunk, sentence) positions naming it, in order
    for n, chunk in enumerate(chunks):
        for m, (_, keys) in enumerate(chunk.mentions):
            for key in keys:
                at.setdefault(key, []).append((n, m))
    candidates = {
        k
        for k in single
        if k in ends
        and k not in after_the
        and sum(1 for p in at.get(k, []) if p < min(at[x][0] for x in ends[k])) < OWN_NAME_MENTIONS
    }
    return (
        {k: ends[k][0] for k in candidates if len(ends[k]) == 1},
        {k for k in candidates if len(ends[k]) > 1},
    )


def _chunk_extraction(
    chunk: _ChunkNames,
    short_of: dict[str, str],
    ambiguous: set[str],
    long_forms: dict[str, dict[str, Any]],
    options: CooccurrenceOptions,
) -> dict[str, list[dict[str, Any]]]:
    """One chunk's ``{"entities", "triples"}`` with the document's short forms settled: a short form
    counts as its longer name (recorded as that name's alias), an ambiguous one names nothing."""
    entities = dict(chunk.entities)
    for short in [k for k in entities if k in short_of or k in ambiguous]:
        record = entities.pop(short)
        if short in ambiguous:
            continue
        long = short_of[short]
        if long not in entities:
            entities[long] = {**long_forms[long], "description": record["description"], "aliases": []}
        entities[long]["aliases"].append(record["name"])
    pairs: dict[tuple[str, str], list[Any]] = {}  # (key a, key b) -> [sentences, first sentence]
    for sentence, named in chunk.mentions:
        keys = [k for k in dict.fromkeys(short_of.get(k, k) for k in named) if k not in ambiguous]
        keys = keys[: options.max_entities_per_sentence]
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                pair = (a, b) if a < b else (b, a)
                entry = pairs.setdefault(pair, [0, sentence])
                entry[0] += 1
    triples = [
        {
            "subject": entities[a]["name"],
            "predicate": options.predicate,
            "object": entities[b]["name"],
            "confidence": min(1.0, 0.5 + 0.25 * (n - 1)),
            "description": clip_text(first, options.description_chars),
            "negated": False,
            "valid_from": None,
            "valid_to": None,
        }
        for (a, b), (n, first) in pairs.items()
    ]
    return {"entities": list(entities.values()), "triples": triples}


def extract_document_cooccurrence(
    chunks: list[tuple[str, str]], options: CooccurrenceOptions
) -> list[dict[str, list[dict[str, Any]]]]:
    """The extractions of one document's chunks (``(text, title)`` each, in order), in the JSON shape of
    an LLM extraction (``{"entities", "triples"}`` per chunk).

    Short forms are settled over the whole document, so "Babbage" in a chunk that never says "Charles
    Babbage" still counts as him when the document does (see the module docstring). A Project Gutenberg
    header and footer and stage directions are not read (:mod:`pgrag_dag.extract.boilerplate`).
    """
    texts = readable_texts([text or "" for text, _ in chunks])
    found = [_chunk_names(text, title, options) for text, (_, title) in zip(texts, chunks)]
    short_of, ambiguous = _short_forms(found, "\n".join(texts))
    long_forms: dict[str, dict[str, Any]] = {}
    for chunk in found:
        for key, record in chunk.entities.items():
            long_forms.setdefault(key, record)
    return [_chunk_extraction(chunk, short_of, ambiguous, long_forms, options) for chunk in found]


def extract_chunk_cooccurrence(
    text: str, title: str, options: CooccurrenceOptions
) -> dict[str, list[dict[str, Any]]]:
    """One chunk's extraction as a document of its own (:func:`extract_document_cooccurrence`)."""
    return extract_document_cooccurrence([(text, title)], options)[0]


def extract_cooccurrence(chunks: pl.DataFrame, options: CooccurrenceOptions, *, version: str) -> pl.DataFrame:
    """Extract every chunk without a model → the ``raw_extractions`` frame (``RAW_SCHEMA``), §4.1.

    ``chunks``: chunk_id (Int64, unique), text, title, and doc_key — the chunks of one document are
    extracted together so its short forms agree (:func:`extract_document_cooccurrence`); without
    doc_key each chunk is its own document. Other columns are ignored. Output: one row per chunk in the
    input's order — pass 0, model :data:`MODEL`, prompt_version ``version``, raw_text and parsed the same JSON
    text (``{"entities": [{"name", "type", "description", "aliases"}], "triples": [{"subject", "predicate",
    "object", "confidence", "description", "negated", "valid_from", "valid_to"}]}``), parse_status ``ok``,
    error null, 0 tokens, cache_hit false; the chunks done of the total go to :mod:`pgrag_dag.progress` after
    each document. Gate it with :func:`pgrag_dag.extract.gates.apply_gates` (§4.3).
    Raises :class:`ExtractionError` when a column is missing, a chunk_id is null or repeated.
    """
    groups = chunks_by_document(chunks, ("chunk_id", "text", "title"))
    items = list(chunks.select("chunk_id", "text", "title").iter_rows())
    parsed: dict[int, dict[str, Any]] = {}
    progress.advance(0, len(items), "chunks")
    for positions in groups:
        for i, out in zip(
            positions, extract_document_cooccurrence([items[i][1:] for i in positions], options)
        ):
            parsed[i] = out
        progress.advance(len(parsed), len(items), "chunks")
    bodies = [json.dumps(parsed[i], ensure_ascii=False) for i in range(len(items))]
    return offline_frame([int(chunk_id) for chunk_id, _, _ in items], bodies, MODEL, version)


def chunks_by_document(chunks: pl.DataFrame, columns: tuple[str, ...]) -> list[list[int]]:
    """The row positions of ``chunks`` grouped by ``doc_key`` (first-seen order; without the column each
    row is a document of its own), each document's in ``chunk_index`` order when the frame has it (what a
    document says first decides its short forms, whatever order the rows come in), for an extractor that
    reads a document's chunks together. Raises :class:`ExtractionError` when one of ``columns`` is missing
    or a chunk_id is null or repeated."""
    missing = [c for c in columns if c not in chunks.columns]
    if missing:
        raise ExtractionError(f"the chunks frame lacks column(s) {missing}")
    ids = chunks["chunk_id"]
    if ids.null_count() or ids.n_unique() != chunks.height:
        raise ExtractionError("chunk_id must be non-null and unique for offline extraction")
    keys = chunks["doc_key"].to_list() if "doc_key" in chunks.columns else list(range(chunks.height))
    by_doc: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        by_doc.setdefault(key, []).append(i)
    if "chunk_index" in chunks.columns and not chunks["chunk_index"].null_count():
        index = chunks["chunk_index"].to_list()
        return [sorted(rows, key=lambda i: index[i]) for rows in by_doc.values()]
    return list(by_doc.values())


def offline_frame(chunk_ids: list[int], bodies: list[str], model: str, version: str) -> pl.DataFrame:
    """The ``raw_extractions`` frame (``RAW_SCHEMA``) of an extractor without a model call: one row per
    chunk id with its extraction JSON ``body`` as raw_text and parsed — pass 0, ``model``, prompt_version
    ``version``, parse_status ``ok``, no error, 0 tokens, no cache hit."""
    rows = [
        {
            "chunk_id": int(chunk_id),
            "pass": 0,
            "model": model,
            "prompt_version": version,
            "raw_text": body,
            "parsed": body,
            "parse_status": "ok",
            "error": None,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cache_hit": False,
        }
        for chunk_id, body in zip(chunk_ids, bodies)
    ]
    return pl.DataFrame(rows, schema=RAW_SCHEMA)
