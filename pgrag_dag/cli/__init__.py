"""pgrag, the command line: ``pgrag_dag.cli:main`` is the console script.

The commands live in modules that each import :mod:`.common` (the Typer app and shared helpers) and
register on import: :mod:`.indexing` (demo, index), :mod:`.query`, :mod:`.cypher`, :mod:`.operations`
(changes, reembed, coverage, retention, unarchive, ui, slots, stop-db, cassette, cache), :mod:`.inspect`
(status, list, top, lineage), :mod:`.graph` (export, view), :mod:`.project` (init, add), :mod:`.delete` and
:mod:`.purge`.
The order of the imports below is the order ``pgrag --help`` lists them.
"""

from __future__ import annotations

import logging

from pgrag_dag.cli.common import app, short_helps

# isort: off
# importing a command module registers its commands; this order is the order `pgrag --help` lists them
from pgrag_dag.cli import indexing, query, cypher, operations, inspect, graph, project, delete, purge  # noqa: F401
# isort: on

__all__ = ["app", "main"]


short_helps(app)


def main() -> None:  # pragma: no cover - console entry
    logging.basicConfig(level=logging.WARNING)
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
