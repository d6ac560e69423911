"""PostgreSQL store: one module per table family.

- :mod:`.db`        connecting (embedded server or ``PGRAG_DATABASE_URL``)
- :mod:`.schema`    DDL for the control schema and a realm's schema; idempotent, concurrency-safe init
- :mod:`.cache`     the LLM response cache and cassettes (control schema)
- :mod:`.documents` chunks (the ``documents`` vertex table)
- :mod:`.staging`   raw extractions and gate decisions
- :mod:`.graph`     entities, relations, doc_mentions
- :mod:`.communities` communities, community_members, community_children
"""
