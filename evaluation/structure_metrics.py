"""The structural metrics of the paper's Table 6 (§8.6), Table 7 (§8.7), §8.8 and §8.15, measured from a
stored space's graph (issue 17 item 2). :mod:`evaluation.structure` indexes arms and tabulates them.

:func:`graph_structure` reads one space and returns, per key:

- from :func:`pgrag_dag.graph.quality.measure_quality` (the ``graph_quality`` check's own SQL, §8.6):
  ``entities`` and ``relations`` (live: not dormant, not superseded), ``distinct_predicates``,
  ``vocabulary_predicate_share`` (live relations whose predicate is a term of the given — reference —
  vocabulary, ``None`` without one), ``orphan_entities`` (live entities no live relation touches),
  ``duplicate_edge_rows``, ``fragmented_short_form_vertices`` (named by a form another vertex declares as an
  alias) and ``pronoun_entities``;
- ``fragmented_graph_vertices`` (:func:`short_form_fragments`): split across short and long surface forms as
  the graph shows it, whatever the aliases declare — a one-word vertex ("Whewell", "Mr. Babbage") equal to the
  first or last word of exactly one longer ``Person`` vertex ("William Whewell") mentioned in a document that
  mentions it too; with ``fragmented_graph_examples``;
- Table 7: ``entities_with_aliases``, ``negated_relations``, ``corroborated_relations`` (weight — distinct
  supporting chunks — above 1) and ``corroborated_share``, ``single_use_predicate_share`` (distinct predicates
  carried by exactly one relation ÷ distinct predicates), ``top_predicates`` (the five commonest, Figure
  8(b));
- §8.8: ``entities_per_10k_chars``, ``relations_per_10k_chars`` (over ``chars`` characters of source text) and
  ``labels_per_relation`` (distinct predicates ÷ relations);
- §8.15 and Table 7: ``communities`` (level 0), ``largest_community_share`` (the largest level-0 community's
  members ÷ live entities), ``report_ratings`` (the distinct level-0 ratings, ascending) and
  ``rating_spread`` ("3 values (7–9)").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl
import psycopg

from pgrag_dag.extract.cooccurrence import CONNECTORS, HONORIFICS, ORG_WORDS
from pgrag_dag.gate_rules import identity_key
from pgrag_dag.graph.quality import EXAMPLES, measure_quality
from pgrag_dag.store import communities as community_store
from pgrag_dag.store import export
from pgrag_dag.store import relations as relation_store
from pgrag_dag.vocabulary import Vocabulary


def _person_like(words: list[str]) -> bool:
    """2–4 words, each capitalised, none a connector or an organisation word."""
    return (
        2 <= len(words) <= 4
        and all(w[:1].isupper() for w in words)
        and not any(w.lower() in CONNECTORS or w.lower().rstrip(".") in ORG_WORDS for w in words)
    )


def _short_word(name: str) -> str | None:
    """The identity key of a one-word name, after a leading honorific ("Mr. Babbage" → "babbage"), else
    None."""
    words = name.split()
    while len(words) > 1 and words[0].lower() in HONORIFICS:
        words = words[1:]
    return identity_key(words[0]) if len(words) == 1 and words[0][:1].isupper() else None


def short_form_fragments(
    names: Mapping[int, str],
    documents: Mapping[int, Iterable[str]],
    types: Mapping[int, str] | None = None,
    *,
    person_types: Iterable[str] = ("person",),
) -> list[tuple[str, str]]:
    """``(short, long)`` name pairs of vertices split across a short and a long surface form, by short-form
    id.

    ``names``: live entity id → canonical name; ``documents``: entity id → the doc_keys of the chunks that
    mention it; ``types``: entity id → type (``None``: every vertex may be a long form). A vertex is a
    fragment when its name is one capitalised word (after leading honorifics) equal, as an identity key, to
    the first or last word of exactly one person-like longer vertex (2–4 capitalised words, no connector, no
    organisation word; typed one of ``person_types``, case-insensitive, when ``types`` is given) among the
    vertices mentioned in a document that mentions it — the rule the offline extractor settles short forms
    by, applied to the stored graph. A short form two longer vertices share names neither ("Ada" beside Ada
    Lovelace and Ada Byron)."""
    wanted = {t.lower() for t in person_types}
    ends: dict[str, list[int]] = {}
    for i, name in names.items():
        words = name.split()
        if _person_like(words) and (types is None or (types.get(i) or "").lower() in wanted):
            for w in {identity_key(words[0]), identity_key(words[-1])}:
                ends.setdefault(w, []).append(i)
    docs = {i: set(d) for i, d in documents.items()}
    out: list[tuple[str, str]] = []
    for i in sorted(names):
        word = _short_word(names[i])
        if word is None or word not in ends:
            continue
        beside = [j for j in ends[word] if j != i and docs.get(i, set()) & docs.get(j, set())]
        if len(beside) == 1:
            out.append((names[i], names[beside[0]]))
    return out


def rating_spread(ratings: Iterable[float]) -> str:
    """ "3 values (7–9)", "1 value (8)", or "no reports"."""
    values = sorted(set(ratings))
    if not values:
        return "no reports"
    fmt = lambda v: f"{v:g}"  # noqa: E731
    span = fmt(values[0]) if len(values) == 1 else f"{fmt(values[0])}–{fmt(values[-1])}"
    return f"{len(values)} value{'s' if len(values) > 1 else ''} ({span})"


def graph_structure(
    conn: psycopg.Connection, realm: str, space: str, vocabulary: Vocabulary, *, chars: int
) -> dict[str, Any]:
    """Every metric of the module docstring for ``realm.space``, read in the caller's transaction (one
    snapshot when it is repeatable read). ``vocabulary``: what ``vocabulary_predicate_share`` counts against;
    ``chars``: the characters of source text the space was built from (> 0)."""
    quality = measure_quality(conn, realm, space, vocabulary)
    entity_frame, _ = relation_store.quality_frames(conn, realm, space)
    live = entity_frame.filter(~pl.col("dormant"))
    typed, rels = community_store.load_graph(conn, realm, space)
    mentions = export.export_mentions(conn, realm, space)
    reports = export.export_communities(conn, realm, space).filter(pl.col("level") == 0)
    names = dict(zip(live["id"].to_list(), live["name"].to_list()))
    documents: dict[int, set[str]] = {}
    for entity_id, doc_key in mentions.select("entity_id", "doc_key").iter_rows():
        documents.setdefault(entity_id, set()).add(doc_key)
    fragments = short_form_fragments(
        names, documents, dict(zip(typed["id"].to_list(), typed["entity_type"].to_list()))
    )
    per_predicate = Counter(rels["predicate"].to_list())
    n_rel, n_ent = rels.height, live.height
    corroborated = rels.filter(pl.col("weight") > 1).height
    largest = int(reports["size"].max() or 0) if reports.height else 0
    ratings = sorted(set(reports["rating"].to_list()))
    return {
        **{k: v for k, v in quality.items() if not k.endswith("_examples")},
        "fragmented_graph_vertices": len(fragments),
        "fragmented_graph_examples": [f"{s} / {long}" for s, long in fragments[:EXAMPLES]],
        "fragmented_examples": quality["fragmented_examples"],
        "pronoun_examples": quality["pronoun_examples"],
        "entities_with_aliases": live.filter(pl.col("aliases").list.len() > 0).height,
        "negated_relations": rels.filter(pl.col("negated")).height,
        "corroborated_relations": corroborated,
        "corroborated_share": round(corroborated / n_rel, 4) if n_rel else None,
        "single_use_predicate_share": (
            round(sum(n == 1 for n in per_predicate.values()) / len(per_predicate), 4)
            if per_predicate
            else None
        ),
        "top_predicates": [
            f"{p} ({n})" for p, n in sorted(per_predicate.items(), key=lambda x: (-x[1], x[0]))[:5]
        ],
        "chars": chars,
        "entities_per_10k_chars": round(10_000 * n_ent / chars, 1),
        "relations_per_10k_chars": round(10_000 * n_rel / chars, 1),
        "labels_per_relation": round(len(per_predicate) / n_rel, 4) if n_rel else None,
        "communities": reports.height,
        "largest_community_share": round(largest / n_ent, 4) if n_ent and reports.height else None,
        "report_ratings": ratings,
        "rating_spread": rating_spread(ratings),
    }
