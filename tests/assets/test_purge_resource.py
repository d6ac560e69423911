"""``QueryResource.purge_document`` / ``purge_space`` (issue 28 item 2): the admin side of erasure in
Dagster — a dry run unless ``dry_run=False``, the same report as the API."""

from __future__ import annotations

from pathlib import Path

from pgrag_dag.engine import Engine
from pgrag_dag.resources.query import QueryResource
from pgrag_dag.store import db
from tests.operate.test_purge import CANARY, SECRET, corpus, data_rows, dump_all  # noqa: F401 (the fixture)


def test_the_query_resource_purges_a_document_then_the_space(
    corpus: Engine,  # noqa: F811
    realm: str,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    rag = QueryResource(realm=realm, config_path=str(tmp_path / "pgrag.yaml"))
    conn = db.connect(pg_dsn, autocommit=True)
    before = data_rows(conn, realm)
    dry = rag.purge_document("main", SECRET)
    assert dry["dry_run"] and dry["removed"]["documents"] == 1 and data_rows(conn, realm) == before
    done = rag.purge_document("main", SECRET, dry_run=False)
    assert done["removed"] == dry["removed"] and CANARY not in dump_all(pg_dsn)
    assert rag.purge_space("main")["removed"]["documents"] == 2
    assert rag.purge_space("main", dry_run=False)["removed"]["documents"] == 2
    assert conn.execute(f"SELECT count(*) FROM pgrag_{realm}.documents").fetchone() == (0,)
    conn.close()
