"""Predicate vocabulary: presets, snapping by stem, explicit aliases, exclusive groups and single-valued
predicates (paper §4.5, §5.2; single-valued predicates go beyond §5.2, issue 27).

A :class:`Vocabulary` is built per realm/space from the configuration (a preset, extra terms, an alias
map, exclusive groups, single-valued predicates). Extracted predicates — already normalised by
:func:`pgrag_dag.gate_rules.normalise_predicate` — are mapped by :meth:`Vocabulary.snap`:

1. the explicit alias map (``collaborated_with`` → ``worked_with``), for wordings no rule relates;
2. snapping onto a vocabulary term whose token stems are equal (``design``, ``designs`` → ``designed``).

Snapping compares whole token sequences, so an inverse relation is never merged onto its converse
(``educated_by`` keeps its ``by`` and never becomes ``educated``). Predicates off the vocabulary
survive unchanged; :func:`off_vocabulary` reports the commonest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from pgrag_dag.errors import ConfigurationError

BIOGRAPHY = (
    "born_in",
    "died_in",
    "child_of",
    "parent_of",
    "sibling_of",
    "married",
    "educated_at",
    "studied_under",
    "taught",
    "worked_with",
    "worked_at",
    "worked_on",
    "employed_by",
    "member_of",
    "elected_to",
    "held_position",
    "founded",
    "designed",
    "built",
    "invented",
    "discovered",
    "wrote",
    "published",
    "translated",
    "described",
    "proposed",
    "influenced",
    "corresponded_with",
    "met",
    "funded",
    "awarded",
    "named_after",
    "lived_in",
    "located_in",
    "succeeded",
)
FINANCE = (
    "reported",
    "acquired",
    "divested",
    "owns",
    "subsidiary_of",
    "segment_of",
    "operates_in",
    "headquartered_in",
    "generates_cash_flow",
    "consumes_cash",
    "increased",
    "decreased",
    "invested_in",
    "issued",
    "repurchased",
    "paid_dividend",
    "borrowed_from",
    "repaid",
    "impaired",
    "launched",
    "discontinued",
    "opened",
    "closed",
    "partnered_with",
    "competes_with",
    "supplies",
    "customer_of",
    "ceo_of",
    "cfo_of",
    "audited_by",
    "grounds",
    "certifies",
)
FINANCE_GROUPS = (
    ("generates_cash_flow", "consumes_cash"),
    ("grounds", "certifies"),
    ("increased", "decreased"),
    ("acquired", "divested"),
    ("launched", "discontinued"),
    ("opened", "closed"),
    ("partnered_with", "competes_with"),
    ("supplies", "customer_of"),
)
NARRATIVE = (
    "friend_of",
    "enemy_of",
    "rival_of",
    "ally_of",
    "opponent_of",
    "loves",
    "married",
    "child_of",
    "parent_of",
    "sibling_of",
    "serves",
    "master_of",
    "killed",
    "wounded",
    "betrayed",
    "saved",
    "imprisoned",
    "freed",
    "met",
    "lives_in",
    "travelled_to",
    "minister_of",
    "king_of",
    "queen_of",
    "captain_of",
    "member_of",
    "commands",
    "disguised_as",
    "known_as",
    "succeeded",
)
NARRATIVE_GROUPS = (("friend_of", "enemy_of", "rival_of", "ally_of", "opponent_of"),)
SIDES = ("subject", "object")
"""The sides a single-valued predicate can hold one value on."""
FINANCE_SINGLE = {
    "headquartered_in": "object",
    "subsidiary_of": "object",
    "audited_by": "object",
    "ceo_of": "subject",
    "cfo_of": "subject",
}
NARRATIVE_SINGLE = {"king_of": "subject", "queen_of": "subject", "captain_of": "subject"}
ALIASES = {
    "collaborated_with": "worked_with",
    "cooperated_with": "worked_with",
    "partnered_with_person": "worked_with",
    "authored": "wrote",
    "penned": "wrote",
    "constructed": "built",
    "attended": "educated_at",
    "studied_at": "educated_at",
    "resided_in": "lived_in",
    "wed": "married",
}


@dataclass(frozen=True)
class Preset:
    """A named controlled vocabulary with its exclusive predicate groups, alias map and single-valued
    predicates (predicate → the side holding one value at a time, :data:`SIDES`)."""

    terms: tuple[str, ...]
    groups: tuple[tuple[str, ...], ...] = ()
    aliases: dict[str, str] = field(default_factory=dict)
    single_valued: dict[str, str] = field(default_factory=dict)


PRESETS: dict[str, Preset] = {
    # born_in / died_in are left out: extraction names a place at several granularities that are all true
    # (London, England), and a single value would supersede the coarser by document order
    "biography": Preset(BIOGRAPHY, (), ALIASES),
    "finance": Preset(FINANCE, FINANCE_GROUPS, {}, FINANCE_SINGLE),
    "narrative": Preset(
        NARRATIVE, NARRATIVE_GROUPS, {"allied_with": "ally_of", "befriended": "friend_of"}, NARRATIVE_SINGLE
    ),
}

_SUFFIXES = (("ies", "y"), ("ied", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""))


def stem(token: str) -> str:
    """A crude English stem for one predicate token (``designed``/``designs``/``design`` → ``design``)."""
    for suffix, repl in _SUFFIXES:
        if token.endswith(suffix) and len(token) - len(suffix) + len(repl) >= 3:
            return token[: len(token) - len(suffix)] + repl
    return token


def stems(predicate: str) -> tuple[str, ...]:
    """The stems of a predicate's underscore-separated tokens."""
    return tuple(stem(t) for t in predicate.split("_") if t)


@dataclass(frozen=True)
class Vocabulary:
    """Controlled vocabulary of one space: ``terms`` (may be empty = free predicates), ``aliases``,
    exclusive ``groups`` and ``single_valued`` predicates (both consumed by supersession).

    ``single_valued`` maps a predicate to the side that holds one value at a time: ``"object"`` — one
    object per subject (``headquartered_in``: a company has one headquarters), ``"subject"`` — one subject
    per object (``cfo_of``: a company has one CFO). A later document's different value on that side
    supersedes the earlier one by document order (§5.2's rule, with no model call)."""

    terms: tuple[str, ...] = ()
    aliases: dict[str, str] = field(default_factory=dict)
    groups: tuple[tuple[str, ...], ...] = ()
    single_valued: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        *,
        preset: str | None = None,
        terms: Iterable[str] = (),
        aliases: dict[str, str] | None = None,
        groups: Iterable[Iterable[str]] = (),
        single_valued: dict[str, str] | None = None,
    ) -> Vocabulary:
        """Combine a preset (by name) with extra terms, aliases, groups and single-valued predicates (the
        configuration's entries override the preset's; ``"none"`` takes a preset's predicate out).

        Raises :class:`ConfigurationError` for an unknown preset, a group or single-valued predicate
        naming a term not in the vocabulary (when it has terms), or a side not in :data:`SIDES`.
        """
        base = Preset(())
        if preset is not None:
            if preset not in PRESETS:
                raise ConfigurationError(
                    f"unknown vocabulary preset {preset!r}; available: {', '.join(sorted(PRESETS))}"
                )
            base = PRESETS[preset]
        all_terms = tuple(dict.fromkeys([*base.terms, *terms]))
        all_groups = tuple(tuple(g) for g in [*base.groups, *groups])
        for g in all_groups:
            unknown = [p for p in g if all_terms and p not in all_terms]
            if unknown:
                raise ConfigurationError(
                    f"exclusive group {list(g)} names predicates not in the vocabulary: {unknown}"
                )
        single = {**base.single_valued, **(single_valued or {})}
        for predicate, side in single.items():
            if side not in (*SIDES, "none"):
                raise ConfigurationError(
                    f"single_valued {predicate!r}: {side!r} is no side; use subject (one subject per "
                    "object), object (one object per subject) or none"
                )
            if all_terms and predicate not in all_terms:
                raise ConfigurationError(
                    f"single_valued names a predicate not in the vocabulary: {predicate!r}"
                )
        single = {p: side for p, side in single.items() if side != "none"}
        return cls(all_terms, {**base.aliases, **(aliases or {})}, all_groups, single)

    @property
    def _by_stems(self) -> dict[tuple[str, ...], str]:
        return {stems(t): t for t in reversed(self.terms)}

    def snap(self, predicate: str) -> str:
        """Map a normalised predicate onto the vocabulary (alias map, then equal stems); else unchanged."""
        predicate = self.aliases.get(predicate, predicate)
        if predicate in self.terms:
            return predicate
        return self._by_stems.get(stems(predicate), predicate)

    def render(self) -> str:
        """The vocabulary as it is shown to the model (empty when there is none)."""
        return ", ".join(self.terms)


def off_vocabulary(
    predicates: Iterable[str], vocabulary: Vocabulary, *, top: int = 10
) -> list[tuple[str, int]]:
    """The ``top`` commonest predicates not in the vocabulary, with counts (the feedback loop of §4.5)."""
    if not vocabulary.terms:
        return []
    counts = Counter(p for p in predicates if p not in vocabulary.terms)
    return counts.most_common(top)
