"""Graph-quality measurements of the paper's Table 6 (§8.6), computed over a stored space.

:func:`graph_quality` defines them over two frames: ``entities`` (id, name, aliases, dormant: bool) and
``relations`` (source_id, target_id, predicate, negated, live: bool — not dormant and not superseded).
:func:`measure_quality` measures the same values in SQL over the store's indexed columns
(:mod:`pgrag_dag.store.quality`), without loading the space (issue 15 item 2).

The three structural defects must be zero, whatever the extractor (:data:`MUST_BE_ZERO`, the blocking
measures): duplicate edge rows (corroboration makes one edge per (subject, predicate, object, negated)),
fragmented short-form vertices (a vertex named by a surface form that another vertex holds as an alias: one
name, two vertices — resolution absorbs such a vertex, §4.6), and pronoun entities (the name gate refuses
them). Each is a defect of the run's stages that would corrupt the graph (corroboration counted twice,
mentions split, unrelated people joined through "he"), never a property of an extractor.

The orphan share (live entities that no live relation names) is a property of the extractor: the ``nlp``
extractor relates only what one sentence's grammar connects, so most of its names stay orphans (75 % of 3,829
on the 41 Microsoft earnings calls), where ``cooccurrence`` and a model relate most. :func:`judge_quality`
warns — never blocks — when the share passes the extractor's own ceiling (:data:`ORPHAN_CEILING`), with the
measured value and the change that would lower it (:data:`ORPHAN_FIX`).
"""

from __future__ import annotations

from typing import Any

import polars as pl
import psycopg

from pgrag_dag.config.sections import GateSettings
from pgrag_dag.gate_rules import PRONOUNS, Gate, identity_key, name_gate
from pgrag_dag.store import quality as store
from pgrag_dag.store import tallies
from pgrag_dag.vocabulary import Vocabulary

MUST_BE_ZERO = ("duplicate_edge_rows", "fragmented_short_form_vertices", "pronoun_entities")
EXAMPLES = 10
"""Names listed per defect (``fragmented_examples``, ``pronoun_examples``)."""
PRONOUN_HEADS = tuple(sorted(PRONOUNS | {"the"}))
"""The first word of the identity key of every pronominal name (:attr:`Gate.PRONOMINAL_NAME`): a pronoun, a
possessive or demonstrative ("his ..."), or "the" ("the company"). Such a name lowercases to the word alone
or to the word and whitespace; only ASCII letters lowercase to its letters (the dotted capital I and the
Kelvin sign lowercase to no pronoun), so the name begins with them, and its key — NFC, invisible characters
and wrapping quotes removed, whitespace collapsed to one space, lowercased — begins with the word followed by
a space or nothing."""


def graph_quality(entities: pl.DataFrame, relations: pl.DataFrame, vocabulary: Vocabulary) -> dict[str, Any]:
    """Table 6's rows for one space: entities, relations, distinct predicates, share of relations on a
    vocabulary predicate (``None`` without a vocabulary), orphan entities, and the three defects; plus
    ``fragmented_examples`` and ``pronoun_examples`` (names, up to 10 each, in id order)."""
    live_e = entities.filter(~pl.col("dormant"))
    live_r = relations.filter(pl.col("live"))
    linked = set(live_r["source_id"].to_list()) | set(live_r["target_id"].to_list())
    alias_owner: dict[str, int] = {}
    for i, aliases in live_e.select("id", "aliases").iter_rows():
        for a in aliases or []:
            alias_owner.setdefault(identity_key(a), i)
    fragmented = [
        n for i, n in live_e.select("id", "name").iter_rows() if alias_owner.get(identity_key(n), i) != i
    ]
    on_vocab = live_r.filter(pl.col("predicate").is_in(list(vocabulary.terms))).height
    return _table6(
        entities=live_e.height,
        relations=live_r.height,
        distinct_predicates=live_r["predicate"].n_unique(),
        on_vocabulary=on_vocab,
        vocabulary=vocabulary,
        orphan_entities=sum(1 for i in live_e["id"].to_list() if i not in linked),
        duplicate_edge_rows=_duplicate_edge_rows(relations),
        fragmented=len(fragmented),
        fragmented_examples=fragmented[:EXAMPLES],
        pronouns=_pronouns(live_e["name"].to_list()),
    )


def measure_quality(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    vocabulary: Vocabulary,
    *,
    kept: dict[str, int] | None = None,
) -> dict[str, Any]:
    """:func:`graph_quality` of the stored space — the same keys and values — measured in SQL in the
    caller's transaction (under the partition lock of a writing stage: it first stores the identity keys
    of entity rows written without them, :func:`pgrag_dag.store.quality.fill_identity_keys`).

    With ``kept`` — the space's counts kept by delta (:func:`pgrag_dag.store.tallies.read`: ``entities``,
    ``orphans``) — the live entities and the orphans are taken from them, and the current relations per
    predicate from :func:`pgrag_dag.store.tallies.predicates`, instead of counted over the space (an
    incremental run, issue 30); without, every aggregate is measured (a full run).

    Python decides only what SQL narrows down: the name gate over the names that start like a pronoun,
    and the Python lowercasing over the edge groups holding a predicate that is not lowercase ASCII."""
    store.fill_identity_keys(conn, realm, space)
    rows = store.quality_rows(
        conn,
        realm,
        space,
        vocabulary.terms,
        pronoun_heads=PRONOUN_HEADS,
        examples=EXAMPLES,
        orphans=kept is None,
        counted_predicates=None if kept is None else tallies.predicates(conn, realm, space),
    )
    if kept is not None:
        rows["entities"], rows["orphan_entities"] = kept["entities"], kept["orphans"]
    candidates = pl.DataFrame(
        rows["duplicate_candidates"],
        orient="row",
        schema={"source_id": pl.Int64, "target_id": pl.Int64, "predicate": pl.String, "negated": pl.Boolean},
    )
    return _table6(
        entities=rows["entities"],
        relations=rows["relations"],
        distinct_predicates=rows["distinct_predicates"],
        on_vocabulary=rows["on_vocabulary"],
        vocabulary=vocabulary,
        orphan_entities=rows["orphan_entities"],
        duplicate_edge_rows=_duplicate_edge_rows(candidates),
        fragmented=rows["fragmented"],
        fragmented_examples=rows["fragmented_examples"],
        pronouns=_pronouns(rows["pronoun_candidates"]),
    )


def quality_passed(metrics: dict[str, Any]) -> bool:
    """Whether every structural defect of :data:`MUST_BE_ZERO` is zero."""
    return all(metrics[k] == 0 for k in MUST_BE_ZERO)


ORPHAN_CEILING = {"llm": 0.5, "cooccurrence": 0.5, "nlp": 0.9}
"""Share of live entities without a live relation above which the extractor's run warns; an extractor not
named here (a user operator) has ``llm``'s."""
ORPHAN_FIX = {
    "llm": "raise extraction.gleaning_passes, or check the prompt's relation examples against the documents",
    "cooccurrence": "raise the extractor's max_entities_per_sentence option (extractor: {name: cooccurrence, "
    "options: {max_entities_per_sentence: 24}})",
    "nlp": "extract with a model (llm.models, and delete the space's `extractor: nlp` line), or use "
    "`extractor: cooccurrence`, which links every pair of names one sentence holds",
}
"""The change that lowers the orphan share, per extractor (the warning says it)."""
DEFECT_MEANING = {
    "duplicate_edge_rows": "edges stored twice for one (subject, predicate, object, negated)",
    "fragmented_short_form_vertices": "names that are a vertex and another vertex's alias",
    "pronoun_entities": "vertices named by a pronoun the name gate should have refused",
}


def judge_quality(metrics: dict[str, Any], extractor: str) -> dict[str, Any]:
    """``metrics`` (:func:`graph_quality`) judged for a space extracted by ``extractor`` (an operator name):
    a copy with ``blocking`` (one line per nonzero measure of :data:`MUST_BE_ZERO`: the count, examples and
    what to run) and ``warnings`` (the orphan share above :data:`ORPHAN_CEILING` for the extractor: the
    measured value and :data:`ORPHAN_FIX`'s change), both lists, and ``extractor``. Blocking lines fail the
    check (:func:`quality_passed`); warnings never do."""
    blocking = []
    for key in MUST_BE_ZERO:
        if metrics[key]:
            examples = {
                "fragmented_short_form_vertices": metrics.get("fragmented_examples"),
                "pronoun_entities": metrics.get("pronoun_examples"),
            }.get(key)
            blocking.append(
                f"{key} {metrics[key]} ({DEFECT_MEANING[key]}"
                + (f", e.g. {', '.join(examples[:5])}" if examples else "")
                + "): `pgrag index REALM.SPACE --full` rebuilds the space's entities and relations; if it "
                "stays, it is a bug of pgrag, not a setting"
            )
    warnings = []
    entities, orphans = metrics["entities"], metrics["orphan_entities"]
    ceiling = ORPHAN_CEILING.get(extractor, ORPHAN_CEILING["llm"])
    if entities and orphans / entities > ceiling:
        warnings.append(
            f"orphan_entities {orphans} of {entities} ({orphans / entities:.0%}, above {ceiling:.0%} for the "
            f"{extractor} extractor): no relation names them, so only their own chunks find them; to relate "
            f"more, {ORPHAN_FIX.get(extractor, ORPHAN_FIX['llm'])}"
        )
    return {**metrics, "extractor": extractor, "blocking": blocking, "warnings": warnings}


def _duplicate_edge_rows(relations: pl.DataFrame) -> int:
    """Rows of every (source, target, lowercased predicate, negated) group holding more than one edge."""
    dupes = (
        relations.group_by("source_id", "target_id", pl.col("predicate").str.to_lowercase(), "negated")
        .len()
        .filter(pl.col("len") > 1)["len"]
        .sum()
    )
    return int(dupes or 0)


def _pronouns(names: list[str]) -> list[str]:
    settings = GateSettings()
    return [n for n in names if name_gate(n, settings) is Gate.PRONOMINAL_NAME]


def _table6(
    *,
    entities: int,
    relations: int,
    distinct_predicates: int,
    on_vocabulary: int,
    vocabulary: Vocabulary,
    orphan_entities: int,
    duplicate_edge_rows: int,
    fragmented: int,
    fragmented_examples: list[str],
    pronouns: list[str],
) -> dict[str, Any]:
    share = on_vocabulary / relations if vocabulary.terms and relations else None
    return {
        "entities": entities,
        "relations": relations,
        "distinct_predicates": distinct_predicates,
        "vocabulary_predicate_share": None if share is None else round(share, 4),
        "orphan_entities": orphan_entities,
        "duplicate_edge_rows": duplicate_edge_rows,
        "fragmented_short_form_vertices": fragmented,
        "pronoun_entities": len(pronouns),
        "fragmented_examples": fragmented_examples,
        "pronoun_examples": pronouns[:EXAMPLES],
    }
