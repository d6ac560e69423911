"""The documents ``bench_scale.py``'s one-document runs touch, how each run changes the source folder, and
``--reuse``: a realm kept by an earlier ``--keep`` run brought back to its built state, so the runs and the
queries can be measured again without the full build (an hour at 1M)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_index as bi
import bench_query as bq
import psycopg
from bench_query_workers import SPACE

APPENDED = " It was later catalogued by the archivist Mara Quenby Halloway."
"""The sentence ``change_one`` appends: one new person, so the change reaches entities and relations."""


def pick_edited(docs: list[dict[str, Any]], chunk_chars: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The document ``change_one`` edits (an original passage that stays one chunk with the sentence
    appended and has room under the 20-name cap) and the one ``delete_one`` removes (the next original)."""
    originals = [d for d in docs[:-2] if d["replica"] == 0]
    fits = [
        i
        for i, d in enumerate(originals)
        if len(d["text"]) + len(APPENDED) < chunk_chars - 200
        and len(bq.chunk_names(d["title"], d["text"])) < 15
    ]
    i = fits[len(fits) // 2]
    return originals[i], originals[i + 1 if i + 1 < len(originals) else i - 1]


@dataclass(frozen=True)
class Touched:
    """The documents the incremental runs touch, and how each run changes the source folder."""

    base: list[dict[str, Any]]
    """What the full build indexes: every document but the two held back."""
    first: dict[str, Any]
    """Held back; ``add_first`` adds it under a name that sorts first in the order."""
    spare: dict[str, Any]
    """Held back; ``add_one`` adds it, last in the order."""
    edited: dict[str, Any]
    deleted: dict[str, Any]
    earliest: str
    """The file name of the first original document (``delete_first`` removes it)."""
    word: str = ""
    """The replica word the added documents and the appended names carry on a reused realm (else empty)."""

    def named(self, name: str) -> str:
        """A made-up person's ``name`` with :attr:`word` (a name new on a reused realm)."""
        return f"{name} {self.word}" if self.word else name

    @property
    def appended(self) -> str:
        """The sentence ``change_one`` appends (:data:`APPENDED`, its person named by :meth:`named`)."""
        return f"{APPENDED[:-1]} {self.word}." if self.word else APPENDED

    @classmethod
    def plan(cls, docs: list[dict[str, Any]], word: str | None = None) -> Touched:
        """The documents of ``docs`` (the last two held back) the runs touch. With ``word`` (a replica word
        no document uses) the added documents and the appended person carry it in their names: on a reused
        realm, where the earlier run's additions lie dormant, they are new again (adding a document back
        revives its entities, with their vectors, instead of inserting them)."""
        from pgrag_dag.config import ChunkingSettings

        base, first, spare = docs[:-2], dict(docs[-2]), dict(docs[-1])
        if word is not None:
            for d in (first, spare):
                d["file"] = f"{d['file'][:-4]}_{word}.txt"
        first["file"] = "0_" + first["file"]
        edited, deleted = pick_edited(docs, ChunkingSettings().chunk_chars)
        return cls(base, first, spare, edited, deleted, min(d["file"] for d in base), word or "")

    def files(self) -> dict[str, str]:
        """Operation → the file it touches."""
        return {
            "add_one": self.spare["file"],
            "add_first": self.first["file"],
            "change_one": self.edited["file"],
            "delete_one": self.deleted["file"],
            "delete_first": self.earliest,
        }

    def apply(self, op: str, src: Path, cache: Callable[[list[str]], Any]) -> None:
        """Change ``src`` as ``op`` does (:data:`OPS`); ``cache(files)`` caches an added or changed file's
        synthetic response first, so the run makes no model call."""
        if op in ("add_one", "add_first", "change_one"):
            doc = {"add_one": self.spare, "add_first": self.first, "change_one": self.edited}[op]
            text = doc["text"] + (self.appended if op == "change_one" else "")
            (src / doc["file"]).write_text(text + "\n", encoding="utf-8")
            cache([doc["file"]])
        elif op == "delete_one":
            (src / self.deleted["file"]).unlink()
        elif op == "delete_first":
            (src / self.earliest).unlink()

    def originals(self) -> dict[str, str]:
        """File → text as the full build indexed it, for the touched files the build held (the edited and
        the deleted ones)."""
        return {
            self.edited["file"]: self.edited["text"],
            self.deleted["file"]: self.deleted["text"],
            self.earliest: next(d["text"] for d in self.base if d["file"] == self.earliest),
        }


def restore_built(
    engine: Any, dsn: str, realm: str, src: Path, touched: Touched, previous: Path, size: int
) -> dict[str, Any]:
    """``--reuse``: bring the realm an earlier ``--keep`` run left (``src`` its documents) back to the
    documents of its build, untimed, and return that run's ``full`` build from its JSON report ``previous``,
    marked ``reused_from``: every file the build did not index is removed, the edited and deleted ones are
    written back as built, and the six stages run once (every response they need is cached). What the
    earlier runs added stays as dormant entities and relations, so ``touched`` must name new documents
    (:meth:`Touched.plan` with a fresh word). Raises ``SystemExit`` when the realm or its documents are not
    there, or the report has no build of this size."""
    reports = {r["size"]: r for r in json.loads(previous.read_text(encoding="utf-8"))["results"]}
    if size not in reports or "full" not in reports[size]:
        raise SystemExit(f"--reuse: {previous} holds no full build of size {size:,}")
    if not src.is_dir() or not any(src.iterdir()):
        raise SystemExit(f"--reuse: no kept documents at {src} (run once with --keep and this --data-dir)")
    with psycopg.connect(dsn) as conn:
        if conn.execute("SELECT 1 FROM pgrag__control.realms WHERE realm = %s", (realm,)).fetchone() is None:
            raise SystemExit(f"--reuse: realm {realm} is not in the database (run once with --keep)")
    t0 = time.perf_counter()
    built = {d["file"] for d in touched.base}
    extra = [p for p in src.iterdir() if p.name not in built]
    for p in extra:
        p.unlink()
    originals = {d["file"]: d["text"] for d in (touched.edited, touched.deleted)}
    originals[touched.earliest] = next(d["text"] for d in touched.base if d["file"] == touched.earliest)
    for name, text in originals.items():
        (src / name).write_text(text + "\n", encoding="utf-8")
    for _name, fn in bi.stage_functions(False):
        fn(engine, realm, SPACE)
    print(
        f"[{size:,}] reused realm {realm}: {len(extra)} added file(s) removed, {len(originals)} written back "
        f"as built and indexed in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    old = reports[size]
    return {"full": {**old["full"], "reused_from": str(previous)}, "synthesis": old.get("synthesis")}
