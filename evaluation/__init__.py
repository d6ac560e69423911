"""The evaluation harness of the paper's §8 (issue 17).

The benchmark scripts here (``bench_*.py``) run as scripts; the modules below are importable as
``evaluation.<module>`` from the repository root (the tests do):

- :mod:`evaluation.scoring`: strict numeric F1 with asserted-answer extraction (§8.11);
- :mod:`evaluation.judges`: the element-wise judge (ECT-QA's native protocol, Table 11), the majority
  panel with the answering model excluded (§8.2) and blind pairwise comparison with position
  transposition (§8.13);
- :mod:`evaluation.benchmarks`: LongMemEval and ECT-QA loaders, their documents for a space, and the
  harness guards (excluded items, per-company document counts; §8.11, §9);
- :mod:`evaluation.harness`: the run record (JSON + Markdown, configuration, models, git revision);
- :mod:`evaluation.ablation` (``python -m evaluation.ablation``): paired ablation on a fixed graph, the
  re-indexing noise floor and the reader sweep (§8.4, §8.12, §8.14), over :mod:`evaluation.answering`
  (items, clients, indexing, answering, scoring) and :mod:`evaluation.paired` (the tables' arithmetic);
- :mod:`evaluation.recall` (``python -m evaluation.recall``): passage recall per query mode on MuSiQue and
  HotpotQA, offline, against BM25 and exact dense retrieval (issue 17 item 1);
- :mod:`evaluation.structure` (``python -m evaluation.structure``): Table 6 / Table 7 / §8.8 / §8.15 per arm,
  measured by :mod:`evaluation.structure_metrics` (issue 17 item 2); :mod:`evaluation.plots` draws their
  charts.
"""
