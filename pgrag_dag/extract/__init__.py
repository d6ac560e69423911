"""Extraction and gating (paper §4.1–4.5): :mod:`.model_extraction` (a model reads each chunk, with
gleaning and document context), the offline extractors — :mod:`.nlp` (a shipped spaCy pipeline: typed
entities, asserted relations; its names in :mod:`.nlp_names`, its model in :mod:`.nlp_pipeline`) and
:mod:`.cooccurrence` (proper-noun phrases and sentence co-occurrence) — and :mod:`.gates` (the
deterministic refusals of Table 2 applied to extractor output; the per-value rules are
:mod:`pgrag_dag.gate_rules`)."""
