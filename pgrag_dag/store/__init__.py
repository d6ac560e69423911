"""PostgreSQL store: all the engine's SQL, one module per table family (the only package that issues SQL).

- :mod:`.db`                 connecting (embedded server or ``PGRAG_DATABASE_URL``)
- :mod:`.schema`             DDL for the control schema and a realm's schema; idempotent, concurrency-safe
  init
- :mod:`.identifiers`        ``pgrag_<realm>.<table>``, the one table-name helper every module uses
- :mod:`.locks`              partition and stage locks, and their order
- :mod:`.cache`              the LLM response cache and cassettes (control schema)
- :mod:`.documents`          chunks (the ``documents`` vertex table), their sparse order keys
- :mod:`.source_files`       what the chunks stage last read from each text file (size, mtime, inode, hash)
- :mod:`.staging`            raw extractions, gate decisions, pending stage rows
- :mod:`.graph`              entities, doc_mentions, the entity forms resolution meets
- :mod:`.relations`          relations: writes, supersession, the edges a batch touches, graph counts
- :mod:`.tallies`            graph counts, entity degrees and predicate counts kept by delta (triggers)
- :mod:`.incoming`           the temporary tables a relations run writes through: edges, supersession, triples
- :mod:`.vectors`            the embedding columns: pending rows, writes, the audit
- :mod:`.embedding_columns`  which tables hold vectors, their width check, HNSW indexes, re-typing
- :mod:`.vector_index`       HNSW indexes and the distance expression of every vector search
- :mod:`.bulk_index`         first loads: HNSW indexes built after the vectors
- :mod:`.deferred_indexes`   first loads: the secondary indexes dropped for the writes, recorded until rebuilt
- :mod:`.communities`        communities, community_members, community_sources, community_children
- :mod:`.retrieval`          read SQL of the query path: temporal predicates, traversal, chunk search
- :mod:`.retrieval_channels` read SQL of the relation channels, communities and graph distance
- :mod:`.walk_graph`         read SQL of the personalised-PageRank walk: its edges, name links, ranked rows
- :mod:`.graph_version`      ``graph_writes``, ``graph_touched``: each space's graph data version and the
                              vertices each write touched, kept by triggers
- :mod:`.history`            the append-only belief history (belief logs, removed documents)
- :mod:`.lineage`            what a community report derives from
- :mod:`.inventory`          what the store holds: realms, spaces, pages of entities and relations
- :mod:`.quality`            the graph-quality measurement and ``entity_keys``
- :mod:`.retention`          archiving and unarchiving entities
- :mod:`.deletion`           explicit deletion of an entity, a space or a realm
- :mod:`.purge`              erasure: the rows a document's text reached, their removal, the purge log
- :mod:`.support`            the support an entity or relation has left, and its re-derived attributes
- :mod:`.export`             read-only SQL of a space's whole graph, for export and the view
- :mod:`.changes`            the change feed between two snapshots
- :mod:`.telemetry`          ``query_events``: what each query touched
- :mod:`.row_counts`         the rows each stage asset holds, for Dagster's ``dagster/row_count``
- :mod:`.work_queue`         incremental indexing: what each stage still owes its space, its data version
"""
