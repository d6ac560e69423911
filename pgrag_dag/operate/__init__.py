"""Operating an index (paper §6): :mod:`.reembed` (switching a realm's embedder), :mod:`.deletion`
(deleting entities and relations), :mod:`.retention` (archiving cold rows), :mod:`.coverage`,
:mod:`.changes` (the change feed), :mod:`.cache_evict`, :mod:`.status`, :mod:`.summary` (a run's
summary) and :mod:`.project` (``pgrag init`` / ``add``). A module here and one of the same name in
:mod:`pgrag_dag.store` are one concept: the operation and its SQL."""
