"""Names for the ``nlp`` extractor (issue 27; §4.1, §4.6): the entities of one parsed chunk, and what is
settled over a whole document — short forms, names the NER missed, the document's organisation, and
personal pronouns.

Entities are NER spans whose label ``type_map`` maps (:data:`~pgrag_dag.extract.nlp_pipeline.DEFAULT_TYPES`;
dates, times, money, percentages and counts are never entities) and, with ``proper_nouns``, runs of proper
nouns the NER left out (type ``Concept``; not runs made only of titles). A name loses leading words without a
capital (an article, a verb the NER took in) or that are function words ("Toward Paris" → Paris), a trailing
possessive or conjunction ("Windows and") and any punctuation at its ends, and an officer's title before "of"
("CFO of Disney" → Disney); a leading honorific or title (:data:`HONORIFICS`: Mr, Mrs, Dr, Sir, Lord, M.,
Mme., MM., Monsieur, Musketeer …, also just before the NER's span or a proper-noun run, a particle between)
and a nobiliary particle after it move into the aliases, so "Monsieur de Treville" is ``Treville`` with
aliases "Monsieur de Treville" and "de Treville". Names with markup, brackets or quotes inside are parse
debris and dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pgrag_dag.extract.cooccurrence import LEADING_STOP, OWN_NAME_MENTIONS, clip_text
from pgrag_dag.extract.nlp_pipeline import NlpOptions
from pgrag_dag.gate_rules import PRONOUNS, identity_key

HONORIFICS = frozenset(
    """
mr mr. mrs mrs. ms ms. miss mx dr dr. sir dame lord lady madame mme mme. mmes mmes. mlle mlle. mlles mlles.
mademoiselle mesdames monsieur messieurs m. mm mm. messrs messrs. prof prof. professor rev rev. reverend
hon hon. captain capt capt. general gen. colonel
col. king queen prince princess emperor empress duke duchess count countess baron baroness cardinal
abbe abbé chevalier monseigneur messire sieur signor master musketeer guardsman lieutenant sergeant
corporal bishop archbishop
""".split()
)
"""Leading words of a name that are honorifics or titles — of address, nobility, rank or the church
("Musketeer Aramis", "Abbe Aramis", "Master Planchet" are Aramis and Planchet): stripped into the
aliases."""

TITLES = frozenset(
    "sir dame lord lady king queen prince princess emperor empress duke duchess count countess baron "
    "baroness cardinal captain general colonel".split()
)
"""Honorifics that name a title rather than address a person: a name met with one is no short form."""

PARTICLES = frozenset({"de", "du", "des", "von", "van", "der", "la", "le"})
"""Nobiliary particles dropped after a stripped honorific ("M. de Treville" → "Treville")."""

INTERJECTIONS = frozenset(
    "thanks thank great yeah yes okay ok congrats congratulations hi hello sure right well good perfect "
    "exactly absolutely wow sorry please operator alright awesome fantastic terrific".split()
)
"""One-word "names" that open spoken turns ("Thanks", "Great"): never entities."""

PERSONAL = frozenset({"he", "she", "him", "her", "his"})
"""Pronouns that stand for a person (:func:`resolve_pronouns`)."""

GENERIC = frozenset({"company", "corporation", "registrant"})
"""Capitalised common nouns a filing uses for itself ("the Company"): its organisation, no name."""

ROLE_WORDS = frozenset(
    "ceo cfo coo cto cao cmo chief executive financial operating technology accounting marketing officer "
    "officers president vice senior chairman chairwoman chair director directors head treasurer secretary "
    "executives".split()
)
"""Words of an officer's title: a NER span "CFO of Disney" names Disney."""


def _clean_span(tokens: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(name tokens, stripped leading honorific tokens) of a span: no leading word without a capital (an
    article, a verb the NER took in) or that is a function word (a preposition, article or conjunction
    opening the sentence: :data:`~pgrag_dag.extract.cooccurrence.LEADING_STOP`), no possessive,
    conjunction or punctuation at the end, no leading officer's title ("CFO of Disney" → Disney), a leading
    honorific and a particle after it split off."""
    toks = list(tokens)
    while toks and not any(c.isupper() for c in toks[0].text):  # "murmured M. de Treville": no name's part
        toks = toks[1:]
    while len(toks) > 1 and toks[0].lower_ in LEADING_STOP and not toks[0].text.isupper():
        toks = toks[1:]  # a sentence's capitalised first word the NER took in: "Toward Paris", "But Athos"
    of = next((i for i, t in enumerate(toks) if t.lower_ == "of"), None)
    if of and all(t.lower_ in ROLE_WORDS or t.lower_ in ("the", "a", "an") for t in toks[:of]):
        toks = toks[of + 1 :]
    while toks and (
        toks[-1].is_punct or toks[-1].tag_ == "POS" or toks[-1].is_space or toks[-1].pos_ == "CCONJ"
    ):  # a conjunction the NER took in before the next name: "across Windows and Linux" → "Windows and"
        toks = toks[:-1]
    stripped: list[Any] = []
    while len(toks) > 1 and _honorific(toks):
        stripped.append(toks[0])
        toks = toks[1:]
        if stripped and len(toks) > 1 and toks[0].lower_ in PARTICLES:
            stripped.append(toks[0])
            toks = toks[1:]
        while len(toks) > 1 and toks[0].is_space:  # a line break after the honorific
            toks = toks[1:]
    return toks, stripped


def _honorific(toks: Sequence[Any]) -> bool:
    """Whether the first of ``toks`` is an honorific: one of :data:`HONORIFICS`, or a bare "M" before a
    particle ("M de Treville", French without the period — a lone "M" elsewhere may be an initial)."""
    first = toks[0]
    return first.lower_ in HONORIFICS or (first.text == "M" and len(toks) > 2 and toks[1].lower_ in PARTICLES)


def _honorific_start(doc: Any, start: int, end: int, floor: int) -> int:
    """Where the name ``doc[start:end]`` begins once the honorifics written just before it are taken in —
    with a nobiliary particle between ("Mlle." + "de" + "Montalais", the NER or a proper-noun run naming
    only "Montalais") — never before token ``floor`` (its sentence's start): :func:`_clean_span` moves them
    into the aliases."""
    while start > floor:
        before = _before(doc, start, floor)
        if before < floor:
            break
        if _honorific(doc[before:end]):
            start = before
        elif doc[before].lower_ in PARTICLES and (earlier := _before(doc, before, floor)) >= floor:
            if not _honorific(doc[earlier:end]):
                break
            start = earlier
        else:
            break
    return start


def _line_break(tok: Any) -> bool:
    """Whether ``tok`` is whitespace inside a paragraph — the line break of hard-wrapped prose, a doubled
    space — not a paragraph's end."""
    return bool(tok.is_space and tok.text.count("\n") <= 1)


def _before(doc: Any, i: int, floor: int) -> int:
    """The index of the word before token ``i``, past the line break of hard-wrapped prose ("M. de" ending
    a line, "Treville" opening the next); ``floor - 1`` when there is none from ``floor`` on."""
    j = i - 1
    if j >= floor and _line_break(doc[j]):
        j -= 1
    return j if j >= floor else floor - 1


_NAME = re.compile(r"^[^\W_](?:[\w .,'’&\-]*[^\W_])?\.?$")
"""What a name may look like: word characters, spaces and ``. , ' ’ & -`` inside (no markup, brackets or
quotes: "Childhood===" and 'Annabella" Milbanke' are parse debris)."""


def _titles_only(tokens: Sequence[Any]) -> bool:
    """Whether a run of proper nouns is only titles and honorifics ("Senior Executive Vice President",
    "Chief Financial Officer"), or holds a token that is no word ("Officer(1"): no name of its own."""
    return all(
        t.lower_ in ROLE_WORDS or t.lower_ in HONORIFICS or t.lower_ in GENERIC for t in tokens
    ) or any(
        not t.text.replace("'", "")
        .replace("’", "")
        .replace("-", "")
        .replace(".", "")
        .replace("&", "")
        .isalnum()
        for t in tokens
    )


VAGUE_MODIFIERS = frozenset(
    "other many such first second third new several same own various much more most last great further "
    "certain early late later little few whole main small large big good modern recent current next "
    "previous following particular general similar different major key important significant".split()
)
"""Modifiers that make no term of a noun ("several parts", "the main characters")."""


def _term(chunk: Any, taken: set[int]) -> list[Any]:
    """The tokens of a term in a noun chunk — its common-noun head with the adjacent compounds and
    adjectives before it ("punched cards", "political economy"), 2–4 words — or none (a head that is no
    lowercase noun, a vague modifier, a word of a name)."""
    root = chunk.root
    if root.pos_ != "NOUN" or not root.is_alpha or not root.is_lower:
        return []
    toks = [root]
    for tok in reversed(list(chunk[: root.i - chunk.start])):
        if tok.dep_ not in ("compound", "amod") or not tok.is_alpha or not tok.is_lower:
            break
        if tok.pos_ not in ("NOUN", "ADJ", "VERB") or tok.lower_ in VAGUE_MODIFIERS:
            break
        toks.insert(0, tok)
    if not 2 <= len(toks) <= 4 or any(t.i in taken for t in toks):
        return []
    return toks


def settle_terms(chunks: list[ChunkNames]) -> None:
    """The candidate terms of a document (:func:`_term`) mentioned at least ``term_mentions`` times in it,
    counted by lemmas ("punched card" = "punched cards"), become ``Concept`` entities named by their most
    frequent form; the others are dropped. A term's words that already name an entity stay that entity's."""
    if not chunks or not chunks[0].options.term_mentions:
        return
    counts: dict[str, dict[str, int]] = {}
    for chunk in chunks:
        for key, toks in chunk.terms:
            forms = counts.setdefault(key, {})
            forms[_text(toks)] = forms.get(_text(toks), 0) + 1
    kept = {
        key: max(forms, key=lambda f: forms[f])
        for key, forms in counts.items()
        if sum(forms.values()) >= chunks[0].options.term_mentions
    }
    for chunk in chunks:
        for key, toks in chunk.terms:
            if key in kept and not any(t.i in chunk.key_of for t in toks):
                name = kept[key]
                ident = identity_key(name)
                chunk.adopt(
                    ident,
                    {
                        "name": name,
                        "type": "Concept",
                        "description": clip_text(toks[0].sent.text, chunk.options.description_chars),
                        "aliases": [],
                    },
                )
                for t in toks:
                    chunk.key_of[t.i] = ident


def _text(tokens: Sequence[Any]) -> str:
    """The text of a run of tokens, its whitespace one space (hard-wrapped prose breaking a line between "M.
    de" and "Treville" gives the alias "M. de Treville") and quotes, brackets and punctuation off its ends."""
    if not tokens:
        return ""
    doc = tokens[0].doc
    return " ".join(doc[tokens[0].i : tokens[-1].i + 1].text.split()).strip(" \t\n\"'“”‘’()[]{}.,;:!?")


class ChunkNames:
    """One parsed chunk (a spaCy ``Doc``): ``entities`` — its entity records by identity key (``name, type,
    description, aliases``, the JSON of an extraction) — and ``key_of``, each token index naming an entity
    → that entity's key. Built from the chunk's NER spans and proper-noun runs (see the module)."""

    def __init__(self, doc: Any, options: NlpOptions) -> None:
        self.doc = doc
        self.entities: dict[str, dict[str, Any]] = {}
        self.key_of: dict[int, str] = {}  # token index -> entity key
        self.options = options
        taken: set[int] = set()
        for ent in doc.ents:
            kind = options.type_map.get(ent.label_)
            if kind is not None:
                start = _honorific_start(doc, ent.start, ent.end, ent.sent.start)  # "Ms." + "McCarthy"
                self._add(list(doc[start : ent.end]), kind, ent.sent.text)
                taken |= set(range(start, ent.end))
        self.terms: list[tuple[str, list[Any]]] = []  # (lemma key, tokens) of candidate terms
        if options.term_mentions:
            for chunk in doc.noun_chunks:
                toks = _term(chunk, taken)
                if toks:
                    self.terms.append((" ".join(t.lemma_.lower() for t in toks), toks))
        if options.proper_nouns:
            run: list[Any] = []
            for tok in [*doc, None]:
                if tok is not None and tok.pos_ == "PROPN" and tok.i not in taken and not tok.is_punct:
                    run.append(tok)
                    continue
                if tok is not None and run and run[-1].text.endswith(".") and _line_break(tok):
                    run.append(tok)  # "St." ending a line of hard-wrapped prose, "Eustache" opening the next
                    continue
                # a run with an entity label is the NER's judgement (a date, a number): not a name here
                words = [t for t in run if not t.is_space]
                if words and not any(t.ent_type_ for t in run) and not _titles_only(words):
                    start = _honorific_start(doc, run[0].i, run[-1].i + 1, run[0].sent.start)
                    self._add(list(doc[start : run[-1].i + 1]), "Concept", run[0].sent.text)
                run = []

    def adopt(self, key: str, record: dict[str, Any], **changes: Any) -> dict[str, Any]:
        """The chunk's record of entity ``key``, made from ``record`` (an entity found elsewhere in the
        document; its own copy of the aliases, ``changes`` applied) when the chunk has none yet."""
        return self.entities.setdefault(key, {**record, "aliases": list(record["aliases"]), **changes})

    def _add(self, span: list[Any], kind: str, sentence: str) -> None:
        toks, stripped = _clean_span(span)
        name = _text(toks)
        words = name.split()
        if (
            not name
            or not any(c.isalpha() for c in name)
            or not _NAME.match(name)
            or (kind == "Concept" and not name[:1].isupper())
            or name.lower() in PRONOUNS
            or len(words) > self.options.max_name_words
            # a name is read without its full stop: a lone "M." is the honorific "m.", no entity "M"
            or (
                len(words) == 1
                and not {name.lower(), f"{name.lower()}."}.isdisjoint(HONORIFICS | INTERJECTIONS)
            )
        ):
            return
        key = identity_key(name)
        record = self.entities.setdefault(
            key,
            {
                "name": name,
                "type": kind,
                "description": clip_text(sentence, self.options.description_chars),
                "aliases": [],
            },
        )
        if record["name"].isupper() and not name.isupper():  # "Amy Hood", not the speaker label "AMY HOOD"
            record["name"] = name
        if stripped:
            for form in (_text([*stripped, *toks]), _text([*stripped[1:], *toks])):
                if form and identity_key(form) != key and form not in record["aliases"]:
                    record["aliases"].append(form)
        for tok in toks:
            self.key_of.setdefault(tok.i, key)


def settle_capitals(chunks: list[ChunkNames]) -> None:
    """A name written only in capitals in a chunk (a transcript's speaker label "AMY HOOD", a heading) takes
    the mixed-case spelling the document writes it in elsewhere ("Amy Hood"), and that record's type when
    its own is the bare ``Concept`` of a proper-noun run: one name, one canonical spelling (§4.6)."""
    # key -> the first mixed-case record of it, a typed one before a Concept
    spelled: dict[str, dict[str, Any]] = {}
    for chunk in chunks:
        for key, record in chunk.entities.items():
            if not record["name"].isupper() and spelled.get(key, {"type": "Concept"})["type"] == "Concept":
                spelled[key] = record
    for chunk in chunks:
        for key, record in chunk.entities.items():
            if record["name"].isupper() and key in spelled:
                record["name"] = spelled[key]["name"]
                if record["type"] == "Concept":
                    record["type"] = spelled[key]["type"]


LEAD_CHARS = 400
"""How far into a document its lead reaches (:func:`lead_person`)."""


def lead_person(chunks: list[ChunkNames]) -> str | None:
    """The key of the document's person: the first person-like name (see :func:`settle_short_forms`)
    named in its lead — the first :data:`LEAD_CHARS` characters of its first chunk, the heading line
    excepted — when that name's last word is the most frequent surname of the document's persons (a
    biography's subject: "Charles Babbage (26 December 1791 – …) was an English polymath", then
    "Babbage" throughout). ``None`` when the lead names no person or another surname is more frequent."""
    if not chunks:
        return None
    doc = chunks[0].doc
    heading_end = doc.text.find("\n")
    lead = None
    for i in sorted(chunks[0].key_of):
        if doc[i].idx >= LEAD_CHARS:
            break
        key = chunks[0].key_of[i]
        record = chunks[0].entities.get(key)
        if (
            doc[i].idx > heading_end
            and record
            and record["type"] == "Person"
            and _person_like(record["name"])
        ):
            lead = key, record["name"].split()[-1]
            break
    if lead is None:
        return None
    counts: dict[str, int] = {}
    persons = {k: r for c in chunks for k, r in c.entities.items() if r["type"] == "Person"}
    surnames = {r["name"].split()[-1] for r in persons.values() if _person_like(r["name"])}
    for chunk in chunks:
        for tok in chunk.doc:
            if tok.text in surnames:
                counts[tok.text] = counts.get(tok.text, 0) + 1
    return lead[0] if counts and max(counts, key=lambda w: counts[w]) == lead[1] else None


def settle_short_forms(chunks: list[ChunkNames], lead: str | None = None) -> None:
    """A one-word name equal to the last word (a surname: of any type, the NER types a lone surname
    unreliably) or the first word (a given name: only a Person or Concept) of exactly one person-like name
    of the document — a Person of 2–4 capitalised words, not all in capitals — becomes that person's
    alias, in every chunk (its mentions count as the person's). A word two persons share stays a name of
    its own — unless one of them is the document's person (``lead``, :func:`lead_person`): "Babbage" in
    Charles Babbage's biography is he, not one of his sons — and so does a name met with a title of
    nobility or office (:data:`TITLES`: "Lord Byron" is not Anne Isabella Byron); an organisation's first
    word never joins a name the NER took for a person ("Microsoft" is not "Microsoft Cloud"); a word the
    document used on its own :data:`~pgrag_dag.extract.cooccurrence.OWN_NAME_MENTIONS` times before the
    longer name first appears stays a name of its own, unless the longer name is the document's person
    ("Azure" is not the "Azure Linux" the NER took for a person)."""
    persons = {
        k: r
        for c in chunks
        for k, r in c.entities.items()
        if r["type"] == "Person" and _person_like(r["name"])
    }
    first: dict[str, list[str]] = {}
    last: dict[str, list[str]] = {}
    for key, record in persons.items():
        words = record["name"].split()
        first.setdefault(identity_key(words[0]), []).append(key)
        last.setdefault(identity_key(words[-1]), []).append(key)
    singles = {
        k: r
        for c in chunks
        for k, r in c.entities.items()
        if len(r["name"].split()) == 1 and not any(a.split()[0].lower() in TITLES for a in r["aliases"])
    }
    short = {}
    mentions = _mention_order(chunks)
    for k, record in singles.items():
        holders = set(last.get(k, []))
        if record["type"] in ("Person", "Concept"):
            holders |= set(first.get(k, []))
        if len(holders) > 1 and lead in holders:
            holders = {lead}
        if len(holders) == 1:
            long = holders.pop()
            if long == lead or _named_before(mentions, k, long) < OWN_NAME_MENTIONS:
                short[k] = long
    for chunk in chunks:
        for s, long in short.items():
            if s not in chunk.entities:
                continue
            record = chunk.entities.pop(s)
            target = chunk.adopt(long, persons[long])
            for form in (record["name"], *record["aliases"]):
                if form not in target["aliases"]:
                    target["aliases"].append(form)
            chunk.key_of = {i: (long if k == s else k) for i, k in chunk.key_of.items()}


def _mention_order(chunks: list[ChunkNames]) -> dict[str, list[tuple[int, int]]]:
    """Each entity key → where its mentions start, in document order ((chunk index, token index); adjacent
    tokens of one key are one mention)."""
    order: dict[str, list[tuple[int, int]]] = {}
    for n, chunk in enumerate(chunks):
        for i in sorted(chunk.key_of):
            key = chunk.key_of[i]
            if chunk.key_of.get(i - 1) != key:
                order.setdefault(key, []).append((n, i))
    return order


def _named_before(order: dict[str, list[tuple[int, int]]], short: str, long: str) -> int:
    """How many mentions of ``short`` come before the first mention of ``long`` (:func:`_mention_order`)."""
    starts = order.get(long)
    if not starts:
        return 0
    return sum(1 for at in order.get(short, []) if at < starts[0])


def _person_like(name: str) -> bool:
    words = name.split()
    return (
        2 <= len(words) <= 4
        and all(w[:1].isupper() and not any(c.isdigit() for c in w) for w in words)
        and (not name.isupper())
    )


NOT_SURNAMES = frozenset({"the", "a", "an", "and", "of", "jr", "sr", "ii", "iii", "iv"})
"""Last words of a person's name that are no surname: linking one would make every "The" a mention."""


def _surname_like(word: str) -> bool:
    """A last word that can stand alone for its person: alphabetic, two letters or more, no function word."""
    return word.isalpha() and len(word) >= 2 and word.lower() not in NOT_SURNAMES


def link_known(chunks: list[ChunkNames]) -> None:
    """Capitalised words naming an entity the document has found elsewhere (its name, an alias or a
    settled short form, up to three words) count as mentions of it where the NER missed them ("Babbage
    worked with ...", parsed as a common noun at a sentence start). A person's surname counts when the name
    looks like a person's (:func:`_person_like`) and the word like a surname (:func:`_surname_like`): a
    NER "person" such as "Magic Kingdom - The" must not turn every sentence-initial "The" into a mention."""
    known: dict[str, tuple[str, dict[str, Any]]] = {}
    surnames: dict[str, set[str]] = {}
    for chunk in chunks:
        for key, record in chunk.entities.items():
            for form in [record["name"], *record["aliases"]]:
                known.setdefault(identity_key(form), (key, record))
            words = record["name"].split()
            if record["type"] == "Person" and _person_like(record["name"]) and _surname_like(words[-1]):
                surnames.setdefault(identity_key(words[-1]), set()).add(key)
    for surname, keys in surnames.items():  # a surname two persons share names neither
        if len(keys) == 1 and surname not in known:
            key = next(iter(keys))
            known[surname] = next((key, c.entities[key]) for c in chunks if key in c.entities)
    for chunk in chunks:
        doc, i = chunk.doc, 0
        while i < len(doc):
            hit = None
            if doc[i].i not in chunk.key_of and doc[i].text[:1].isupper():
                for n in (3, 2, 1):
                    span = doc[i : i + n]
                    if len(span) == n and not any(t.i in chunk.key_of for t in span):
                        if (found := known.get(identity_key(span.text))) is not None:
                            hit = (n, found)
                            break
            if hit is None:
                i += 1
                continue
            n, (key, record) = hit
            chunk.adopt(key, record, description=clip_text(doc[i].sent.text, chunk.options.description_chars))
            for j in range(i, i + n):
                chunk.key_of[j] = key
            i += n


def document_subject(chunks: list[ChunkNames]) -> tuple[str, dict[str, Any]] | None:
    """The document's organisation. When its heading (the first line of its first chunk) names an
    organisation, that one — or the shortest organisation of the document whose name begins it ("Microsoft"
    for "Microsoft Earnings Conference Call"): a filing's or a call's heading says whose it is. Otherwise
    the Organization entity scoring most: a point per mention, one per mention of a longer organisation
    name it begins ("Microsoft" in "Microsoft Cloud"); ties to the first named. Generic words
    (:data:`GENERIC`) are never the subject. ``None`` when the document names no organisation. "the
    Company" in its text names the subject too (the generic entity is dropped)."""
    mentions: list[str] = []
    heading: list[str] = []
    for n, chunk in enumerate(chunks):
        first_line = chunk.doc.text.split("\n", 1)[0]
        last = None
        for i in sorted(chunk.key_of):
            key = chunk.key_of[i]
            if (
                key != last
                and key not in GENERIC
                and chunk.entities.get(key, {}).get("type") == "Organization"
            ):
                mentions.append(key)
                if n == 0 and chunk.doc[i].idx < len(first_line):
                    heading.append(key)
            last = key
    if not mentions:
        return None
    names = list(dict.fromkeys(mentions))
    if heading:
        named = heading[0]
        subject = min((k for k in names if named == k or named.startswith(f"{k} ")), key=len)
    else:
        score = {
            k: mentions.count(k) + sum(mentions.count(o) for o in names if o.startswith(f"{k} "))
            for k in names
        }
        subject = max(names, key=lambda k: score[k])  # max keeps the first of equals
    record = next(c.entities[subject] for c in chunks if subject in c.entities)
    for chunk in chunks:
        for tok in chunk.doc:
            if (
                tok.lower_ in GENERIC
                and tok.text[:1].isupper()
                and tok.i > 0
                and tok.nbor(-1).lower_ == "the"
            ):
                chunk.key_of[tok.i] = subject
        chunk.key_of = {i: subject if k in GENERIC else k for i, k in chunk.key_of.items()}
        dropped = [chunk.entities.pop(k, None) for k in GENERIC]
        if any(dropped) or subject in chunk.key_of.values():
            chunk.adopt(subject, record)
    return subject, record


def resolve_pronouns(chunks: list[ChunkNames], lead: str | None = None) -> None:
    """A personal pronoun (:data:`PERSONAL`) stands for the person last named as a subject before it in
    the chunk, or, before any, for the document's person (``lead`` when given, else the Person named in
    most of its chunks; either only when named in at least half of them: the subject of a biography) — a
    heuristic, not coreference resolution: "She translated Menabrea's article" in Ada Lovelace's article
    is hers."""
    counts: dict[str, int] = {}
    for chunk in chunks:
        for name, entity in chunk.entities.items():
            if entity["type"] == "Person":
                counts[name] = counts.get(name, 0) + 1
    main = lead if lead in counts else max(counts, key=lambda k: counts[k]) if counts else None
    if main is not None and counts[main] * 2 < len(chunks):
        main = None
    main_record = next((c.entities[main] for c in chunks if main in c.entities), None) if main else None
    for chunk in chunks:
        last: str | None = main
        last_record: dict[str, Any] | None = main_record
        for tok in chunk.doc:
            key = chunk.key_of.get(tok.i)
            record = chunk.entities.get(key or "")
            if record is not None and record["type"] == "Person" and tok.dep_ in ("nsubj", "nsubjpass"):
                last, last_record = key, record
            elif key is None and tok.lower_ in PERSONAL and last is not None and last_record is not None:
                chunk.key_of[tok.i] = last
                chunk.adopt(last, last_record)
