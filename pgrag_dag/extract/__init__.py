"""Extraction and gating (paper §4.1–4.5): :mod:`.model_extraction` (a model reads each chunk, with
gleaning and document context), :mod:`.cooccurrence` (the offline extractor) and :mod:`.gates` (the
deterministic refusals of Table 2 applied to extractor output; the per-value rules are
:mod:`pgrag_dag.gate_rules`)."""
