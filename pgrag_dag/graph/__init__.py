"""The graph (paper §4.6–§6): :mod:`.resolution` (one vertex per canonical name), :mod:`.relations`
(corroboration, negation, validity), :mod:`.supersession`, :mod:`.communities` (Leiden and the topic
hierarchy) with :mod:`.community_reports`, :mod:`.quality` (graph quality measures), :mod:`.export`
and :mod:`.view` (the HTML graph view). Pure operations over frames; their SQL is in
:mod:`pgrag_dag.store` (modules of the same name there hold a concept's SQL)."""
