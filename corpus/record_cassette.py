"""Record the demo corpus's cassette from hand-authored responses, through real litellm calls.

No model is reachable on the machines this project is built on, so the responses in
``corpus/<corpus>/responses/*.jsonl`` were written by hand, as a careful extraction model would
answer the project's own prompts (see corpus/README.md). This script serves them from a local
OpenAI-compatible server (``pgrag_dag.testing.stub_server``), indexes the corpus through litellm against it
into a scratch realm, and exports every response the run received as the cassette. Prompts it has
no authored answer for are written to ``--pending`` for an author to answer.

    python corpus/record_cassette.py                             # wiki.demo → corpus/wikipedia/cassette.jsonl
    python corpus/record_cassette.py --partition tenk.disney     # → corpus/disney_10k/cassette.jsonl

To record against a real model instead, point the settings at it and export:
``PGRAG_LLM__MODELS='["openai/gpt-4o-mini"]' pgrag index wiki.demo && pgrag cassette export FILE``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHUNK = re.compile(r"<<<CHUNK\n(.*)\nCHUNK>>>", re.DOTALL)


def authored_key(messages: list[dict[str, str]]) -> tuple[str, int]:
    """The key an authored response is filed under, robust to wording changes elsewhere in a prompt.

    Extraction: (chunk content hash, pass). Community report: ("members:" + hash of the sorted entity
    names). Parent report: ("children:" + hash of the sorted child titles). Synthesis: ("question:" +
    hash of the question). Anything else: ("user:" + hash of the user message).
    """
    system, user = messages[0]["content"], messages[-1]["content"]
    m = CHUNK.search(user)
    if m:
        return hashlib.sha256(m.group(1).encode()).hexdigest(), int(
            user.startswith("Some entities and triples were missed")
        )
    if system.startswith("You write a report on one community"):
        names = sorted(
            line[2:].split(" [", 1)[0]
            for line in user.split("Relations:")[0].splitlines()
            if line.startswith("- ")
        )
        return "members:" + hashlib.sha256("\n".join(names).encode()).hexdigest(), 0
    if system.startswith("You write a report on a topic"):
        titles = sorted(line[3:] for line in user.splitlines() if line.startswith("## "))
        return "children:" + hashlib.sha256("\n".join(titles).encode()).hexdigest(), 0
    if user.startswith("Question: "):  # the question and the date it is asked for
        asked = user.split("\n\n", 1)[0][10:]
        return "question:" + hashlib.sha256(asked.encode()).hexdigest(), 0
    return "user:" + hashlib.sha256(user.encode()).hexdigest(), 0


def load_authored(responses: Path) -> dict[tuple[str, int], str]:
    """(key, pass) → response text, from every ``*.jsonl`` under ``responses``.

    A line is ``{"content_hash", "pass", "response"}`` (extraction) or ``{"key", "response"}``.
    """
    out: dict[tuple[str, int], str] = {}
    for path in sorted(responses.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                e = json.loads(line)
                out[(e.get("content_hash") or e["key"], int(e.get("pass", 0)))] = e["response"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--partition", default="wiki.demo", help="the pgrag.yaml partition whose sources to record"
    )
    ap.add_argument("--responses", type=Path, help="authored responses (default: <corpus>/responses)")
    ap.add_argument(
        "--out", type=Path, help="cassette to write (default: the partition's configured cassette)"
    )
    ap.add_argument("--pending", type=Path, default=Path("pending_prompts.jsonl"))
    ap.add_argument("--realm", default="cassette_recording")
    ap.add_argument("--no-communities", dest="communities", action="store_false")
    args = ap.parse_args()

    from psycopg import sql

    from pgrag_dag.assets.demo import BELIEF_QUESTIONS, DEMO_QUESTIONS, belief_queries
    from pgrag_dag.config import LLMSettings, load_settings
    from pgrag_dag.engine import Engine
    from pgrag_dag.ingest.sources import without_last_file
    from pgrag_dag.names import split_partition_key
    from pgrag_dag.pipeline import index_documents
    from pgrag_dag.store import cache, schema
    from pgrag_dag.store.history import before_added
    from pgrag_dag.testing.stub_server import StubServer

    src_realm, space = split_partition_key(args.partition)
    base = load_settings()
    spec = base.space_spec(src_realm, space)
    corpus_dir = base.resolve(spec.sources[0].path)
    responses = args.responses or corpus_dir / "responses"
    out = args.out or corpus_dir / "cassette.jsonl"
    authored = load_authored(responses)
    pending: list[dict] = []

    def answer(messages: list[dict[str, str]]) -> str:
        key = authored_key(messages)
        if key in authored:
            return authored[key]
        pending.append({"key": key[0], "pass": key[1], "messages": messages})
        raise LookupError(f"no authored response for {key[0][:40]}")

    from pgrag_dag.config import RealmSpec

    realms = {args.realm: RealmSpec(spaces={space: spec})}
    with StubServer(answer) as server:
        llm = LLMSettings(
            models=["openai/hand-authored"],
            api_base=server.base_url,
            api_key="none",
            deadline_s=30,
            max_retries=0,
        )
        settings = base.model_copy(update={"llm": llm, "realms": realms, "cassettes": []})
        engine = Engine.from_settings(settings)
        with engine.connect(autocommit=True) as conn:
            schema.init_control(conn)
            conn.execute("DELETE FROM pgrag__control.llm_cache WHERE model = 'openai/hand-authored'")
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(schema.schema_for(args.realm))
                )
            )
            conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (args.realm,))
        withheld = None
        try:
            if (
                args.partition in BELIEF_QUESTIONS
            ):  # as the demo does: first without the last document, no communities
                first, withheld = without_last_file(settings, spec)
                first_settings = settings.model_copy(
                    update={"realms": {args.realm: RealmSpec(spaces={space: first})}}
                )
                first_engine = Engine.from_settings(first_settings)
                try:
                    index_documents(first_engine, args.realm, space, communities=False)
                finally:
                    first_engine.close()
            results = index_documents(engine, args.realm, space, communities=args.communities)
        except Exception as exc:  # unanswered prompts are still written out below
            print(f"indexing stopped: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
            results = []
        from pgrag_dag.query import QueryParam, query

        questions = list(DEMO_QUESTIONS.get(args.partition, []))
        if withheld is not None:
            with engine.connect() as conn:
                instant = before_added(conn, args.realm, space, withheld)
            questions += belief_queries(args.partition, instant) if instant is not None else []
        for question, overrides in questions:
            try:
                query(
                    question,
                    QueryParam(space=space, **overrides),
                    dsn=engine.dsn,
                    realm=args.realm,
                    embedder=engine.embedder(),
                    client=engine.client(),
                )
            except Exception as exc:  # a pending synthesis prompt is reported below
                print(f"query: {exc}", file=sys.stderr)
        with engine.connect(autocommit=True) as conn:
            rows = conn.execute(
                "SELECT key, prompt_key, model, purpose, request, response, prompt_tokens, completion_tokens"
                " FROM pgrag__control.llm_cache WHERE model = 'openai/hand-authored' ORDER BY key"
            ).fetchall()
        with out.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(
                    json.dumps(dict(zip(cache.CASSETTE_FIELDS, row)), ensure_ascii=False, sort_keys=True)
                    + "\n"
                )
        for r in results:
            print(r.stage, json.dumps(r.metadata, default=str)[:300])
    if pending:
        with args.pending.open("w", encoding="utf-8") as fh:
            for p in pending:
                fh.write(json.dumps(p, ensure_ascii=False) + "\n")
        print(
            f"{len(pending)} prompt(s) without an authored response written to {args.pending}",
            file=sys.stderr,
        )
    print(f"{len(rows)} responses written to {out}")
    return 1 if pending else 0


if __name__ == "__main__":
    sys.exit(main())
