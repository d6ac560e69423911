"""Graph-quality measurements of the paper's Table 6 (§8.6), computed over a stored space.

Input frames: ``entities`` (id, name, aliases, dormant: bool) and ``relations`` (source_id,
target_id, predicate, negated, live: bool — not dormant and not superseded).

The three structural defects must be zero: duplicate edge rows (corroboration makes one edge per
(subject, predicate, object, negated)), fragmented short-form vertices (a vertex named by a surface
form that another vertex holds as an alias), and pronoun entities.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from pgrag_dag.config import GateSettings
from pgrag_dag.gates import Gate, identity_key, name_gate
from pgrag_dag.vocabulary import Vocabulary

MUST_BE_ZERO = ("duplicate_edge_rows", "fragmented_short_form_vertices", "pronoun_entities")


def graph_quality(entities: pl.DataFrame, relations: pl.DataFrame, vocabulary: Vocabulary) -> dict[str, Any]:
    """Table 6's rows for one space: entities, relations, distinct predicates, share of relations on a
    vocabulary predicate (``None`` without a vocabulary), orphan entities, and the three defects; plus
    ``fragmented_examples`` and ``pronoun_examples`` (names, up to 10 each)."""
    live_e = entities.filter(~pl.col("dormant"))
    live_r = relations.filter(pl.col("live"))
    linked = set(live_r["source_id"].to_list()) | set(live_r["target_id"].to_list())
    dupes = (relations.group_by("source_id", "target_id", pl.col("predicate").str.to_lowercase(), "negated")
             .len().filter(pl.col("len") > 1)["len"].sum())
    alias_owner: dict[str, int] = {}
    for i, aliases in live_e.select("id", "aliases").iter_rows():
        for a in aliases or []:
            alias_owner.setdefault(identity_key(a), i)
    fragmented = [n for i, n in live_e.select("id", "name").iter_rows()
                  if alias_owner.get(identity_key(n), i) != i]
    settings = GateSettings()
    pronouns = [n for n in live_e["name"].to_list() if name_gate(n, settings) is Gate.PRONOMINAL_NAME]
    on_vocab = (live_r.filter(pl.col("predicate").is_in(list(vocabulary.terms))).height / live_r.height
                if vocabulary.terms and live_r.height else None)
    return {
        "entities": live_e.height,
        "relations": live_r.height,
        "distinct_predicates": live_r["predicate"].n_unique(),
        "vocabulary_predicate_share": None if on_vocab is None else round(on_vocab, 4),
        "orphan_entities": sum(1 for i in live_e["id"].to_list() if i not in linked),
        "duplicate_edge_rows": int(dupes or 0),
        "fragmented_short_form_vertices": len(fragmented),
        "pronoun_entities": len(pronouns),
        "fragmented_examples": fragmented[:10],
        "pronoun_examples": pronouns[:10],
    }


def quality_passed(metrics: dict[str, Any]) -> bool:
    """Whether every structural defect of :data:`MUST_BE_ZERO` is zero."""
    return all(metrics[k] == 0 for k in MUST_BE_ZERO)
