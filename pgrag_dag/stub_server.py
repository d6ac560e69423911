"""A local OpenAI-compatible HTTP server for tests and for recording cassettes offline.

Serves ``POST /v1/chat/completions`` and ``POST /v1/embeddings`` on loopback. Chat answers come
from a callable ``answer(messages) -> str`` (raise :class:`LookupError` to return HTTP 404, any
other exception gives HTTP 500); embeddings from the deterministic hashing embedder. Every request
is appended to :attr:`StubServer.requests` so tests can assert on what reached the "model".
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pgrag_dag.embedding import HashingEmbedder

Answer = Callable[[list[dict[str, str]]], str]


class StubServer:
    """Context manager running the server in a daemon thread; ``base_url`` ends in ``/v1``."""

    def __init__(self, answer: Answer, *, embedding_dim: int = 384) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.embedder = HashingEmbedder(embedding_dim)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "StubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append({"path": self.path, "body": body})
                if self.path.endswith("/embeddings"):
                    inputs = body.get("input", [])
                    inputs = [inputs] if isinstance(inputs, str) else inputs
                    data = [
                        {"object": "embedding", "index": i, "embedding": v.tolist()}
                        for i, v in enumerate(server.embedder.embed(inputs))
                    ]
                    self._send(200, {"object": "list", "data": data, "model": body.get("model", "stub"),
                                     "usage": {"prompt_tokens": 0, "total_tokens": 0}})
                    return
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    text = server.answer(body.get("messages", []))
                except LookupError as exc:
                    self._send(404, {"error": {"message": str(exc), "type": "not_found"}})
                    return
                except Exception as exc:
                    self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})
                    return
                prompt_chars = sum(len(m.get("content") or "") for m in body.get("messages", []))
                self._send(200, {
                    "id": f"chatcmpl-stub-{len(server.requests)}", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "stub"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": prompt_chars // 4, "completion_tokens": len(text) // 4,
                              "total_tokens": (prompt_chars + len(text)) // 4},
                })

        return Handler
