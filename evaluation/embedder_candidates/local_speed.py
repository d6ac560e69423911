"""Issue 30 item 4: the local model's speed before/after, back to back, with vector drift and recall.

``before`` is :class:`LocalEmbedder` as it was at git revision ``--before`` (default ``0d75508``, the
commit before the change: the wheel's graph as shipped, spinning threads, 1,024-token passes), loaded
from ``git show`` into its own module; ``after`` is the working tree's. Both run in this process, in the
project's venv (no extra package).

Texts: the MuSiQue (1,890) and HotpotQA (994) pools as ``title\\ntext`` (what the recall below retrieves),
and the two other kinds the ``embeddings`` stage embeds, built from HotpotQA's sentences in the stage's
shapes: entities ``name: description`` (title: one sentence, cut at 300 characters like the nlp extractor's
descriptions) and relations ``subject predicate object: description``.

Throughput: ``--per-kind`` texts of each kind (default 128), embedded through ``embed_distinct`` 64 texts
per call (as the stage calls it), ``--rounds`` rounds interleaving before/after; texts/s of wall time and
texts per CPU-second of this process (the steadier figure on a shared machine), and the cores other
processes kept busy meanwhile. Drift: cosine of after to before per text over every text embedded (min,
1st percentile, mean). Recall@2/@5 over each pool, brute-force cosine, 100 questions each
(``common.dense_recall``).

    .venv/bin/python evaluation/embedder_candidates/local_speed.py          # ~6 min on two busy cores
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for path in (REPO, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import common  # noqa: E402

from pgrag_dag.config.sections import EmbeddingSettings  # noqa: E402
from pgrag_dag.providers.embedding import LOCAL_MODEL, LocalEmbedder, embed_distinct  # noqa: E402


def stage_texts() -> dict[str, list[str]]:
    """The four kinds of text (see the module docstring), in a fixed order."""
    pool = json.loads((common.CORPORA / "hotpotqa_hipporag_train100/hotpotqa_train_corpus.json").read_text())
    titles = list(pool)
    entities, relations = [], []
    for i, title in enumerate(titles):
        entities += [f"{title}: {s.strip()[:300]}" for s in pool[title] if s.strip()]
        other = titles[(i * 7 + 3) % len(titles)]
        relations.append(f"{title} related_to {other}: {pool[title][0].strip()[:300]}")
    return {
        "musique": common.load_musique(with_title=True)[0],
        "hotpotqa": common.load_hotpot(with_title=True)[0],
        "entities": entities,
        "relations": relations,
    }


def embedder_at(revision: str) -> LocalEmbedder:
    """:class:`LocalEmbedder` of ``pgrag_dag/providers/embedding.py`` at git ``revision``."""
    source = subprocess.run(
        ["git", "show", f"{revision}:pgrag_dag/providers/embedding.py"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType(f"embedding_at_{revision}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{revision}:embedding.py", "exec"), module.__dict__)
    return module.LocalEmbedder(EmbeddingSettings(model=LOCAL_MODEL, dim=384))


def vectors(embedder: LocalEmbedder, texts: list[str]) -> np.ndarray:
    """``texts`` embedded as the stage does (64 per call), in order: (len(texts), 384)."""
    by_text = embed_distinct(embedder, texts, batch_size=64, progress=None)
    return np.array([by_text[t] for t in texts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="0d75508")
    parser.add_argument("--per-kind", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    arms = {"before": embedder_at(args.before), "after": LocalEmbedder(EmbeddingSettings())}
    kinds = stage_texts()
    sample = [t for texts in kinds.values() for t in texts[: args.per_kind]]
    for embedder in arms.values():
        vectors(embedder, sample[:64])  # warm up
    timing: dict[str, list[tuple[float, float, float]]] = {k: [] for k in arms}
    for _ in range(args.rounds):
        for name, embedder in arms.items():
            with common.Timer() as t:
                vectors(embedder, sample)
            timing[name].append((len(sample) / t.wall, len(sample) / t.cpu, t.others_cores))
    print(
        f"throughput on {len(sample)} texts ({args.per_kind} of each kind), {args.rounds} interleaved rounds"
    )
    for name, rows in timing.items():
        a = np.array(rows)
        print(
            f"  {name:6s} texts/s {a[:, 0].mean():6.1f} (best {a[:, 0].max():6.1f})  "
            f"per CPU-s {a[:, 1].mean():6.1f}  other processes {a[:, 2].mean():.2f} cores"
        )
    cosines: dict[str, np.ndarray] = {}
    recall: dict[str, dict[str, dict[str, float]]] = {name: {} for name in arms}
    for kind in ("entities", "relations"):
        texts = kinds[kind][: 4 * args.per_kind]
        cosines[kind] = (vectors(arms["after"], texts) * vectors(arms["before"], texts)).sum(1)
    for data in ("musique", "hotpotqa"):
        _, questions, gold = common.DATASETS[data](with_title=True)
        got = {}
        for name, embedder in arms.items():
            passages = vectors(embedder, kinds[data])
            queries = np.array(embedder.embed(questions, "query"))
            recall[name][data] = common.dense_recall(passages, queries, gold)
            got[name] = (passages, queries)
        cosines[data] = (got["after"][0] * got["before"][0]).sum(1)
        cosines[f"{data} questions"] = (got["after"][1] * got["before"][1]).sum(1)
    print("cosine of after to before, per text")
    for kind, c in cosines.items():
        print(
            f"  {kind:20s} n={c.size:5d} min {c.min():.4f}  p1 {np.percentile(c, 1):.4f}  mean {c.mean():.4f}"
        )
    print("recall@2 / recall@5")
    for name, by_data in recall.items():
        print(
            "  " + name + "  " + "  ".join(f"{d} {r['r@2']:.3f} / {r['r@5']:.3f}" for d, r in by_data.items())
        )


if __name__ == "__main__":
    main()
