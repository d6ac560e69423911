"""Record the demo corpus's cassette from hand-authored responses, through real litellm calls.

No model is reachable on the machines this project is built on, so the responses in
``corpus/wikipedia/responses/*.jsonl`` were written by hand, as a careful extraction model would
answer the project's own prompts (see corpus/README.md). This script serves them from a local
OpenAI-compatible server (``pgrag_dag.stub_server``), indexes the corpus through litellm against it
into a scratch realm, and exports every response the run received as the cassette. Prompts it has
no authored answer for are written to ``--pending`` for an author to answer.

    python corpus/record_cassette.py            # writes corpus/wikipedia/cassette.jsonl

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


def load_authored(responses: Path) -> dict[tuple[str, int], str]:
    """(key, pass) → response text; key is the chunk's content hash or a prompt's user-message hash."""
    out: dict[tuple[str, int], str] = {}
    for path in sorted(responses.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                e = json.loads(line)
                key = e.get("content_hash") or e["user_sha256"]
                out[(key, int(e.get("pass", 0)))] = e["response"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--responses", type=Path, default=HERE / "wikipedia" / "responses")
    ap.add_argument("--out", type=Path, default=HERE / "wikipedia" / "cassette.jsonl")
    ap.add_argument("--pending", type=Path, default=Path("pending_prompts.jsonl"))
    ap.add_argument("--realm", default="cassette_recording")
    ap.add_argument("--no-communities", dest="communities", action="store_false")
    args = ap.parse_args()

    from pgrag_dag.config import LLMSettings, load_settings
    from pgrag_dag.engine import Engine
    from pgrag_dag.pipeline import index_documents
    from psycopg import sql

    from pgrag_dag.store import cache, schema
    from pgrag_dag.stub_server import StubServer

    authored = load_authored(args.responses)
    pending: list[dict] = []

    def answer(messages: list[dict[str, str]]) -> str:
        user = messages[-1]["content"]
        m = CHUNK.search(user)
        if m:
            p = 1 if user.startswith("Some entities and triples were missed") else 0
            key = hashlib.sha256(m.group(1).encode()).hexdigest()
            if (key, p) in authored:
                return authored[(key, p)]
        usha = hashlib.sha256(user.encode()).hexdigest()
        if (usha, 0) in authored:
            return authored[(usha, 0)]
        pending.append({"user_sha256": usha, "messages": messages})
        raise LookupError(f"no authored response for prompt {usha[:12]}")

    settings = load_settings()
    space = "demo"
    realms = {args.realm: settings.realms["wiki"]}
    with StubServer(answer) as server:
        llm = LLMSettings(models=["openai/hand-authored"], api_base=server.base_url, api_key="none",
                          deadline_s=30, max_retries=0)
        settings = settings.model_copy(update={"llm": llm, "realms": realms, "cassettes": []})
        engine = Engine.from_settings(settings)
        with engine.connect(autocommit=True) as conn:
            schema.init_control(conn)
            conn.execute("DELETE FROM pgrag_control.llm_cache WHERE model = 'openai/hand-authored'")
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema.schema_for(args.realm))))
            conn.execute("DELETE FROM pgrag_control.realms WHERE realm = %s", (args.realm,))
        results = index_documents(engine, args.realm, space, communities=args.communities)
        from pgrag_dag.query import QueryParam, query

        question = DEMO_QUESTION
        try:
            query(question, QueryParam(space=space), dsn=engine.dsn, realm=args.realm, embedder=engine.embedder(),
                  client=engine.client())
        except Exception as exc:  # a pending synthesis prompt is reported below
            print(f"query: {exc}", file=sys.stderr)
        with engine.connect(autocommit=True) as conn:
            rows = conn.execute(
                "SELECT key, prompt_key, model, purpose, request, response, prompt_tokens, completion_tokens"
                " FROM pgrag_control.llm_cache WHERE model = 'openai/hand-authored' ORDER BY key").fetchall()
        with args.out.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(dict(zip(cache.CASSETTE_FIELDS, row)), ensure_ascii=False, sort_keys=True) + "\n")
        for r in results:
            print(r.stage, json.dumps(r.metadata, default=str)[:300])
    if pending:
        with args.pending.open("w", encoding="utf-8") as fh:
            for p in pending:
                fh.write(json.dumps(p, ensure_ascii=False) + "\n")
        print(f"{len(pending)} prompt(s) without an authored response written to {args.pending}", file=sys.stderr)
    print(f"{len(rows)} responses written to {args.out}")
    return 1 if pending else 0


DEMO_QUESTION = "How did Ada Lovelace contribute to Charles Babbage's Analytical Engine?"

if __name__ == "__main__":
    sys.exit(main())
