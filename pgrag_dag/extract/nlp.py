"""Offline extraction that asserts: typed entities and relations from a shipped spaCy pipeline, no model
call (issue 27; paper §4.1, §4.3, §5.1).

The ``nlp`` extractor reads every chunk with spaCy's English pipeline (tokeniser, tagger, dependency
parser, lemmatiser, NER; :mod:`pgrag_dag.extract.nlp_pipeline`: installed from PyPI with the package, its
files checked by SHA-256 before use). Its output is the ``raw_extractions`` frame of an LLM extraction
(``RAW_SCHEMA``, model :data:`MODEL`), so the same gates (§4.3), vocabulary snapping (§4.5), resolution
and supersession (§5.2) apply downstream.

Entities (:mod:`pgrag_dag.extract.nlp_names`) — typed NER spans and proper-noun runs, honorifics moved
into aliases, and phrases of common nouns the document repeats ("punched cards") as ``Concept``s; settled
per document: a name in capitals takes the document's mixed-case spelling ("AMY HOOD" → Amy Hood), a one-word
name that is the first or last word of exactly one person's name — or of the
person the document's lead names, when that surname is its most frequent — is that person's alias;
capitalised words naming an entity found elsewhere in the document are its mentions; "the Company" is the
document's organisation; a personal pronoun stands for the person last named as a subject (or the
document's person) — heuristics, not coreference resolution. A full stop glued to the next sentence
(:data:`GLUED`) gets its space back before parsing, and a curly apostrophe is read as a straight one
(:data:`CURLY_APOSTROPHE`), so names and possessives are one spelling whichever a document types; a Project
Gutenberg header and footer and a transcript's stage directions are not read
(:mod:`pgrag_dag.extract.boilerplate`).

Relations — from the dependency parse of each sentence (confidence by pattern, :data:`CONFIDENCE`):

- **verb**: a subject (``nsubj``, or the ``agent`` of a passive) and a direct object, attribute or
  prepositional object of the same verb, conjuncts shared ("Babbage designed the Engine" → ``designed``
  with the biography vocabulary; "X worked with Y" → ``work_with``; "Ada was born in London" →
  ``born_in``, the passive's participle kept before its preposition; a relative pronoun stands for the
  noun its clause qualifies, a common noun for the name in apposition to it; a verb without a subject of
  its own takes its clause's: "X worked on Y, publishing Z", "X was its public face, backed by Y");
- **path**: a name deeper in the verb's own clause, down objects, prepositions, appositions and
  possessors (:data:`MAX_HOPS` edges, never into another clause), with the last preposition on the way;
- **role**: an apposition, a copular attribute or an appointment naming a role of something ("Amy Hood,
  chief financial officer of Microsoft" / "X is the CEO of Y" / "X was appointed Chief Financial
  Officer" → ``cfo_of`` / ``ceo_of``; :data:`ROLES` abbreviates the usual officer titles; "founder of" →
  ``founded``, "daughter of" → ``child_of``); an officer's role naming no organisation is the document's
  organisation's (an earnings call's "Amy Hood, chief financial officer");
- the predicate is the lemma (verb, particle, preposition), or the form the space's vocabulary holds
  (its surface or past tense), snapped by the vocabulary (§4.5) so exclusive groups, single-valued
  predicates and ``predicate_aliases`` apply; light verbs (``be``, ``have``, ``do`` …) alone assert
  nothing;
- **event nouns** (:data:`NOMINALS`): "Microsoft's acquisition of LinkedIn" → ``acquired``; "our
  acquisition of Nuance" in a call → the document's organisation ``acquired`` Nuance;
- **none from a question**: a sentence ending with ``?`` asserts nothing (:func:`is_question`);
- **negated** when the verb carries a negation (``not``, ``n't``, ``never``, ``no longer``);
- **validity** from a DATE entity attached to the verb by a preposition (``in``, ``on``, ``since``,
  ``from`` → ``valid_from``; ``until``, ``till``, ``through`` → ``valid_to``) or by "effective",
  normalised as in §5.1 (:func:`pgrag_dag.temporal.normalise_date`; vague dates are discarded).

What it cannot find: relations across sentences, through coreference other than the pronoun heuristic,
stated by nouns other than the event nouns of :data:`NOMINALS`, or spread over a table; a name the NER does
not find and that is not a proper noun (a capitalised common noun opening a sentence); the types of names
the NER does not know.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import polars as pl

from pgrag_dag import progress
from pgrag_dag.extract.boilerplate import readable_texts
from pgrag_dag.extract.cooccurrence import chunks_by_document, clip_text, offline_frame
from pgrag_dag.extract.nlp_names import (
    ChunkNames,
    document_subject,
    lead_person,
    link_known,
    resolve_pronouns,
    settle_capitals,
    settle_short_forms,
    settle_terms,
)
from pgrag_dag.extract.nlp_pipeline import NlpOptions, load_pipeline
from pgrag_dag.gate_rules import VAGUE_PREDICATES, normalise_predicate
from pgrag_dag.temporal import normalise_date
from pgrag_dag.vocabulary import Vocabulary

MODEL = "offline-nlp"
"""The ``model`` column of every row this extractor writes."""

ROLES = {
    "chief executive officer": "ceo",
    "chief financial officer": "cfo",
    "chief operating officer": "coo",
    "chief technology officer": "cto",
    "chief accounting officer": "cao",
    "chief marketing officer": "cmo",
    "ceo": "ceo",
    "cfo": "cfo",
    "coo": "coo",
    "cto": "cto",
    "founder": "founded",
    "co-founder": "founded",
    "cofounder": "founded",
    "daughter": "child_of",
    "son": "child_of",
    "child": "child_of",
    "father": "parent_of",
    "mother": "parent_of",
    "wife": "married",
    "husband": "married",
    "spouse": "married",
}
"""Role phrases (lowercase lemmas) → the predicate stem: an abbreviation takes ``_of`` (``cfo_of``); a
full predicate (one with ``_`` or a verb form) is used as it is."""

IRREGULAR_PAST = {
    "build": "built",
    "write": "wrote",
    "teach": "taught",
    "meet": "met",
    "lead": "led",
    "buy": "bought",
    "sell": "sold",
    "hold": "held",
    "become": "became",
    "begin": "began",
    "bear": "born",
    "give": "gave",
    "make": "made",
    "win": "won",
    "leave": "left",
    "find": "found",
    "know": "knew",
    "see": "saw",
    "take": "took",
    "run": "ran",
}
"""Past forms of irregular verbs, tried against the vocabulary (whose terms are mostly past tense)."""

LIGHT_VERBS = frozenset({"be", "have", "do", "get", "make", "say", "tell", "think", "go", "come", "let"})
"""Verbs that assert nothing alone (a role attribute of ``be`` still does)."""

ROLE_VERBS = frozenset({"be", "become", "remain", "serve", "name", "appoint", "elect", "promote", "hire"})
"""Verbs whose object or attribute is a role of the subject ("X was appointed Chief Financial Officer")."""

OFFICER_ROLES = frozenset(
    {"ceo", "cfo", "coo", "cto", "cao", "cmo", "chairman", "chairwoman", "president", "treasurer", "director"}
)
"""Roles that belong to an organisation even when the sentence does not name it."""

FROM_PREPS = frozenset({"in", "on", "since", "from", "as", "effective", "starting"})
TO_PREPS = frozenset({"until", "till", "through", "to"})
RELATIVE = frozenset({"who", "which", "that", "whom"})
CONFIDENCE = {"verb": 0.8, "preposition": 0.7, "role": 0.85, "path": 0.6, "noun": 0.7}
"""Confidence by pattern: a verb's direct object or attribute, a prepositional object, a role, a name
deeper in the verb's clause (:meth:`_Relations.reach`), an event noun (:data:`NOMINALS`)."""
NOMINALS = {
    "acquisition": ("acquired", ("of",)),
    "purchase": ("acquired", ("of",)),
    "takeover": ("acquired", ("of",)),
    "divestiture": ("divested", ("of",)),
    "sale": ("sold", ("of",)),
    "investment": ("invested_in", ("in",)),
    "stake": ("invested_in", ("in",)),
    "partnership": ("partnered_with", ("with",)),
    "merger": ("merged_with", ("with",)),
}
"""Nouns that state an event between two names → (predicate, the prepositions introducing the object):
"Microsoft's acquisition of LinkedIn" → ``acquired``; without a named possessor ("our acquisition of
Nuance" in an earnings call) the holder is the document's organisation."""
PATH_DEPS = frozenset({"dobj", "attr", "oprd", "prep", "pobj", "appos", "conj", "poss", "npadvmod", "dative"})
MAX_HOPS = 4
GLUED = re.compile(r"(?<=[a-z0-9)\]])\.(?=[A-Z][a-z])")
"""A full stop with no space before a capitalised word ("publishing in 1825.With Herschel"): paragraphs
joined by text export; parsed as one token, it merges two sentences — a space is put after it."""
CURLY_APOSTROPHE = "\u2019"
"""The typographic apostrophe (’), read as ``'`` (one character for one: offsets hold): the pipeline was
trained on straight apostrophes and parses "LinkedIn’s Talent Solutions" as one name where it splits
"LinkedIn's Talent Solutions" (and "D’Artagnan" as punctuation), and names keep the apostrophe they are
written with — one document's "Noelle O’Mara" would be another's "Noelle O'Mara" (identity keys compare
characters as written, §4.6)."""


def _conjuncts(tok: Any) -> list[Any]:
    return [tok, *[c for c in tok.conjuncts if c.i > tok.i]]


def _negated(verb: Any) -> bool:
    for child in verb.children:
        if child.dep_ == "neg":
            return True
        if child.lower_ == "longer" and any(g.lower_ == "no" for g in child.children):
            return True
    return False


def _dates(verb: Any) -> tuple[str | None, str | None]:
    """(valid_from, valid_to) from DATE entities attached to ``verb`` by a preposition."""
    start = end = None
    for effective in (c for c in verb.children if c.lower_ in ("effective", "starting", "beginning")):
        for when in (c for c in effective.subtree if c.ent_type_ == "DATE"):  # "effective June 30, 2015"
            ent = next((e for e in when.doc.ents if e.start <= when.i < e.end), None)
            start = start or normalise_date(ent.text if ent is not None else when.text)
    for prep in (c for c in verb.children if c.dep_ == "prep"):
        for obj in (c for c in prep.children if c.dep_ == "pobj"):
            if obj.ent_type_ != "DATE":
                continue
            ent = next((e for e in obj.doc.ents if e.start <= obj.i < e.end), None)
            value = normalise_date(ent.text if ent is not None else obj.text)
            if value is None:
                continue
            if prep.lower_ in FROM_PREPS and start is None:
                start = value
            elif prep.lower_ in TO_PREPS and end is None:
                end = value
    return start, end


def _controlled(verb: Any) -> tuple[list[Any], list[Any]]:
    """(subjects, passive subjects) a verb without a subject of its own takes from what it hangs on: a
    conjoined, complement or adverbial verb shares its head's subject ("X joined Y and led Z", "X worked on
    Y, publishing in 1825"); a past participle hanging on a clause or a name is said of that subject or
    name ("X was its public face, backed by Y"; "the Engine, designed by X")."""
    head = verb.head
    if verb.dep_ == "acl" and verb.tag_ == "VBN" and head.pos_ in ("PROPN", "NOUN"):
        return [], [head]
    if verb.dep_ not in ("conj", "xcomp", "advcl") or head.pos_ not in ("VERB", "AUX"):
        return [], []
    active = [c for c in head.children if c.dep_ == "nsubj"]
    passive = [c for c in head.children if c.dep_ == "nsubjpass"]
    if verb.tag_ == "VBN" and (verb.dep_ == "advcl" or (verb.dep_ == "conj" and passive)):
        return [], active + passive
    return active, []


def is_question(sentence: str) -> bool:
    """Whether ``sentence`` ends with a question mark (closing quotes, brackets and spaces after it aside):
    a question asserts none of its relations."""
    return sentence.rstrip(" \t\r\n\"'”’»)]").endswith("?")


def past_tense(lemma: str) -> str:
    """An English verb's past form (``acquire`` → ``acquired``, ``study`` → ``studied``, irregulars from
    :data:`IRREGULAR_PAST`): a candidate spelling of the vocabulary's predicates."""
    if lemma in IRREGULAR_PAST:
        return IRREGULAR_PAST[lemma]
    if lemma.endswith("e"):
        return f"{lemma}d"
    if len(lemma) > 2 and lemma.endswith("y") and lemma[-2] not in "aeiou":
        return f"{lemma[:-1]}ied"
    return f"{lemma}ed"


def _role(noun: Any) -> str | None:
    """The role stem a noun phrase names ("chief financial officer" → ``cfo``), else its lemma."""
    words = [c.lemma_.lower() for c in noun.lefts if c.dep_ in ("amod", "compound")] + [noun.lemma_.lower()]
    if "vice" in words:  # a vice president is no president
        return "vice_" + noun.lemma_.lower()
    for n in range(len(words), 0, -1):
        phrase = " ".join(words[-n:])
        if phrase in ROLES:
            return ROLES[phrase]
    if noun.pos_ == "PROPN" and noun.lemma_.lower() in OFFICER_ROLES:  # "Chairman", "President"
        return noun.lemma_.lower()
    return noun.lemma_.lower() if noun.pos_ == "NOUN" and noun.is_alpha and noun.is_lower else None


class _Relations:
    """The triples of one parsed chunk (see the module docstring)."""

    def __init__(
        self,
        chunk: ChunkNames,
        vocabulary: Vocabulary | None,
        subject: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        self.chunk, self.vocabulary = chunk, vocabulary
        self.subject = subject[0] if subject else None
        self.subject_record = subject[1] if subject else None
        self.triples: dict[tuple[str, str, str, bool], dict[str, Any]] = {}

    def entity(self, tok: Any) -> str | None:
        """The entity key ``tok`` names: its own, the noun a relative pronoun stands for ("the Engine,
        which …"), or a name in apposition to a common noun ("the poet Lord Byron")."""
        if tok.lower_ in RELATIVE and tok.head.dep_ == "relcl":
            tok = tok.head.head
        key = self.chunk.key_of.get(tok.i)
        if key is None and tok.pos_ == "NOUN":
            key = next(
                (
                    self.chunk.key_of[c.i]
                    for c in tok.children
                    if c.dep_ == "appos" and c.i in self.chunk.key_of
                ),
                None,
            )
        return key

    def predicate(self, *forms: str | None) -> str | None:
        """The first of ``forms`` (best first) that snaps into the space's vocabulary — also tried with its
        verb in the past tense (:func:`past_tense`), the vocabulary's usual spelling — else the last form
        (the lemma); ``None`` when every form is vague or empty."""
        spelled = [normalise_predicate(f) for f in forms if f]
        spelled = [f for f in spelled if f and f not in VAGUE_PREDICATES]
        if not spelled:
            return None
        if self.vocabulary is not None and self.vocabulary.terms:
            pasts = [
                normalise_predicate("_".join([past_tense(f.split("_")[0]), *f.split("_")[1:]]))
                for f in spelled
            ]
            for form in [*spelled, *pasts]:
                snapped = self.vocabulary.snap(form)
                if snapped in self.vocabulary.terms:
                    return snapped
        return spelled[-1]

    def add(
        self, subj: Any, pred: str | None, obj: Any, verb: Any, pattern: str, *, dated: bool = True
    ) -> None:
        """The triple (``subj``'s entity, ``pred``, ``obj``'s entity) — tokens, or entity keys — negated
        and dated by ``verb`` (its dates only when ``dated``)."""
        s = subj if isinstance(subj, str) else self.entity(subj)
        o = obj if isinstance(obj, str) else self.entity(obj)
        if pred is None or s is None or o is None or s == o or o not in self.chunk.entities:
            return
        if is_question(verb.sent.text):  # asked, not asserted: "I mean Amazon gives us margins, but …?"
            return
        negated = _negated(verb)
        start, end = _dates(verb) if dated else (None, None)
        entities = self.chunk.entities
        key = (s, pred, o, negated)
        if key not in self.triples:
            self.triples[key] = {
                "subject": entities[s]["name"],
                "predicate": pred,
                "object": entities[o]["name"],
                "confidence": CONFIDENCE[pattern],
                "description": clip_text(verb.sent.text, self.chunk.options.description_chars),
                "negated": negated,
                "valid_from": start,
                "valid_to": end,
            }

    def verb(self, verb: Any) -> None:
        children = list(verb.children)
        subjects = [c for c in children if c.dep_ in ("nsubj", "csubj")]
        passive = [c for c in children if c.dep_ == "nsubjpass"]
        agents = [p for c in children if c.dep_ == "agent" for p in c.children if p.dep_ == "pobj"]
        if not subjects and not passive:
            subjects, passive = _controlled(verb)
        lemma = verb.lemma_.lower()
        if len(lemma) < 2 or not lemma.isalpha():  # "'m", "'s", a tagger's slip: no predicate
            return
        particle = "_".join(c.lower_ for c in children if c.dep_ == "prt")
        base = f"{lemma}_{particle}" if particle else lemma
        surface = f"{verb.lower_}_{particle}" if particle else verb.lower_
        if passive and agents:  # "The Engine was designed by Babbage": Babbage designed the Engine
            for a in (x for agent in agents for x in _conjuncts(agent)):
                for o in (x for p in passive for x in _conjuncts(p)):
                    self.add(a, self.predicate(surface, base), o, verb, "verb")
        if passive and not agents:  # "Ada was born in London": born_in
            subjects, surface_only = passive, True
        else:
            surface_only = False
        for obj_dep in ("dobj", "attr", "oprd", "dative"):
            for obj in (c for c in children if c.dep_ == obj_dep):
                if obj_dep == "attr" or lemma in ROLE_VERBS:
                    self.role(subjects, obj, verb)
                if lemma in LIGHT_VERBS or surface_only:
                    continue
                pred = self.predicate(surface, base)
                for s in (x for subj in subjects for x in _conjuncts(subj)):
                    for o in _conjuncts(obj):
                        self.add(s, pred, o, verb, "verb")
        for prep in (c for c in children if c.dep_ == "prep"):
            if prep.lower_ == "as":  # "X serves as CFO of Y", "X was named as chairman of Y"
                for noun in (c for c in prep.children if c.dep_ == "pobj"):
                    self.role(subjects, noun, verb)
            if lemma in LIGHT_VERBS and not surface_only:
                continue
            p = prep.lower_
            pred = self.predicate(f"{surface}_{p}", None if surface_only else f"{base}_{p}")
            for obj in (c for c in prep.children if c.dep_ == "pobj"):
                for s in (x for subj in subjects for x in _conjuncts(subj)):
                    for o in _conjuncts(obj):
                        self.add(s, pred, o, verb, "preposition")
        if lemma not in LIGHT_VERBS:
            self.reach(
                verb, [x for subj in subjects for x in _conjuncts(subj)], surface if surface_only else base
            )

    def reach(self, verb: Any, subjects: list[Any], stem: str) -> None:
        """The names deeper in the verb's own clause ("Babbage designed a machine for the Royal Society" →
        ``design_for``): from the verb down objects, prepositions, appositions, possessors and conjuncts,
        at most :data:`MAX_HOPS` edges, never into another clause (a verb) — the predicate is the verb's
        stem and the last preposition on the way."""
        frontier: list[tuple[Any, str | None, int]] = [
            (c, None, 1) for c in verb.children if c.dep_ in PATH_DEPS
        ]
        while frontier:
            tok, prep, hops = frontier.pop()
            if tok.pos_ in ("VERB", "AUX"):
                continue
            prep = tok.lower_ if tok.dep_ == "prep" else prep
            if tok.i in self.chunk.key_of and hops > 1:
                pred = self.predicate(f"{stem}_{prep}" if prep else stem)
                for s in subjects:
                    self.add(s, pred, tok, verb, "path")
            if hops < MAX_HOPS:
                frontier += [(c, prep, hops + 1) for c in tok.children if c.dep_ in PATH_DEPS]

    def role(self, holders: Iterable[Any], noun: Any, verb: Any, *, apposed: bool = False) -> None:
        """``holder`` is ``noun`` of something: "X, the CFO of Y" / "X is the CFO of Y" → ``cfo_of`` (an
        apposition — ``apposed`` — takes no date and no negation from the clause around it, and names its
        own holder only, not the names conjoined with it); each conjunct role on its own ("President and
        Chief Financial Officer"). An officer's role
        (:data:`OFFICER_ROLES`) naming no organisation is the document's organisation's, when it has one
        (``self.subject``): "Amy Hood, chief financial officer" in a Microsoft transcript."""
        people = list(holders) if apposed else [x for holder in holders for x in _conjuncts(holder)]
        titles = []
        for title in _conjuncts(noun):  # a list of people with their titles conjoins them all: stop at a name
            if title.i in self.chunk.key_of:
                break
            titles.append(title)
        while titles:
            title = titles.pop(0)
            stem = _role(title)
            if stem is None:
                continue
            pred = self.predicate(stem if stem in ("founded", "married") or "_" in stem else f"{stem}_of")
            objects = []
            for prep in (c for c in title.children if c.dep_ == "prep" and c.lower_ in ("of", "at", "for")):
                for obj in (c for c in prep.children if c.dep_ == "pobj"):
                    for o in _conjuncts(obj):  # "Chairman of the Board and Chief Executive Officer"
                        if o.i not in self.chunk.key_of and _role(o) in OFFICER_ROLES:
                            titles.append(o)
                        else:
                            objects.append(o)
            if not objects and stem in OFFICER_ROLES and self.subject and self.subject_record:
                objects = [self.subject]
                self.chunk.adopt(self.subject, self.subject_record)
            for h in people:
                for o in objects:
                    self.add(h, pred, o, title if apposed else verb, "role", dated=not apposed)

    def nominal(self, noun: Any) -> None:
        """An event noun (:data:`NOMINALS`) with its object ("acquisition of LinkedIn") and its holder: a
        named possessor ("Microsoft's"), else — possessed by "our", "its", "their" or nobody — the
        document's organisation; dated by the noun's own prepositions ("in 2016")."""
        stem, preps = NOMINALS[noun.lemma_.lower()]
        pred = self.predicate(stem)
        objects = [
            o
            for prep in noun.children
            if prep.dep_ == "prep" and prep.lower_ in preps
            for obj in prep.children
            if obj.dep_ == "pobj"
            for o in _conjuncts(obj)
        ]
        owners = [c for c in noun.children if c.dep_ == "poss"]
        holders: list[Any] = [o for o in owners if self.entity(o) is not None]
        if not holders and all(o.lower_ in ("our", "its", "their") for o in owners):
            if self.subject and self.subject_record:
                holders = [self.subject]
                self.chunk.adopt(self.subject, self.subject_record)
        for h in holders:
            for o in objects:
                self.add(h, pred, o, noun, "noun")

    def read(self) -> list[dict[str, Any]]:
        for tok in self.chunk.doc:
            if tok.pos_ in ("VERB", "AUX") and tok.dep_ != "aux" and tok.dep_ != "auxpass":
                self.verb(tok)
            elif tok.pos_ == "NOUN" and tok.lemma_.lower() in NOMINALS:
                self.nominal(tok)
            elif tok.dep_ == "appos" and (tok.pos_ == "NOUN" or tok.lower_ in ROLES):
                self.role([tok.head], tok, tok.head, apposed=True)
            elif (
                tok.dep_ == "conj"
                and self.chunk.entities.get(self.chunk.key_of.get(tok.head.i, ""), {}).get("type") == "Person"
                and _role(tok) in OFFICER_ROLES
            ):
                self.role([tok.head], tok, tok.head, apposed=True)  # "…, Amy Hood, chief financial officer,"
        return list(self.triples.values())


def extract_documents(
    documents: list[list[str]], options: NlpOptions, vocabulary: Vocabulary | None = None
) -> list[list[dict[str, list[dict[str, Any]]]]]:
    """The extractions of each document's chunk texts, in order, in the JSON shape of an LLM extraction
    (``{"entities", "triples"}`` per chunk), reporting the chunks parsed of the total to
    :mod:`pgrag_dag.progress` as they are read. Raises :class:`ModelError` when the pipeline is
    missing."""
    nlp = load_pipeline(options.model)
    flat = [
        GLUED.sub(". ", text).replace(CURLY_APOSTROPHE, "'")
        for texts in documents
        for text in readable_texts(texts)
    ]
    docs = iter(nlp.pipe(flat, batch_size=options.batch_size, n_process=options.n_process))
    out: list[list[dict[str, list[dict[str, Any]]]]] = []
    done = 0
    progress.advance(0, len(flat), "chunks")
    for texts in documents:
        chunks = []
        for _ in texts:  # the pipeline parses lazily, a batch at a time: a chunk is through once read
            chunks.append(ChunkNames(next(docs), options))
            done += 1
            progress.advance(done, len(flat), "chunks")
        settle_capitals(chunks)
        lead = lead_person(chunks)
        settle_short_forms(chunks, lead)
        link_known(chunks)
        settle_terms(chunks)
        subject = document_subject(chunks)
        resolve_pronouns(chunks, lead)
        out.append(
            [
                {"entities": list(c.entities.values()), "triples": _Relations(c, vocabulary, subject).read()}
                for c in chunks
            ]
        )
    return out


def extract_nlp(
    chunks: pl.DataFrame, options: NlpOptions, *, version: str, vocabulary: Vocabulary | None = None
) -> pl.DataFrame:
    """Extract every chunk with the spaCy pipeline → the ``raw_extractions`` frame (``RAW_SCHEMA``), §4.1.

    ``chunks``: chunk_id (Int64, unique), text, and doc_key (a document's chunks are read together so its
    short forms agree; without doc_key each chunk is its own document). Output: one row per chunk in the
    input's order — pass 0, model :data:`MODEL`, prompt_version ``version``, raw_text and parsed the same
    JSON. Raises :class:`ExtractionError` when a column is missing or a chunk_id is null or repeated, and
    :class:`ModelError` when the pipeline is not installed or its files differ."""
    groups = chunks_by_document(chunks, ("chunk_id", "text"))
    texts = chunks["text"].to_list()
    parsed: dict[int, dict[str, Any]] = {}
    for positions, result in zip(
        groups, extract_documents([[texts[i] for i in g] for g in groups], options, vocabulary)
    ):
        parsed.update(zip(positions, result))
    bodies = [json.dumps(parsed[i], ensure_ascii=False) for i in range(chunks.height)]
    return offline_frame(chunks["chunk_id"].to_list(), bodies, MODEL, version)
