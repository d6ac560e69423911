"""A local OpenAI-compatible HTTP server for tests and for recording cassettes offline.

Serves ``POST /v1/chat/completions`` and ``POST /v1/embeddings`` on loopback. Chat answers come
from a callable ``answer(messages) -> str`` (raise :class:`LookupError` to return HTTP 404,
:class:`StubStatus` for any status, any other exception gives HTTP 500); embeddings from the
deterministic hashing embedder. A chat request with ``"stream": true`` is answered as OpenAI streams:
server-sent events, one ``chat.completion.chunk`` per word of the answer (its trailing blank kept, so
the pieces join to the answer), a last chunk with ``finish_reason`` and usage, then ``data: [DONE]``;
with :attr:`StubServer.cut_streams_after` set, only that many pieces, then the connection closes (a stream
broken mid-answer).
:meth:`StubServer.refuse` makes every later request of a route fail
with one HTTP status (401, 403, 404, 400, 429, 500, …) and an OpenAI-style error body, as a provider
does, until :meth:`StubServer.accept`. Every request is appended to :attr:`StubServer.requests` so tests
can assert on what reached the "model". :attr:`StubServer.in_flight` counts the requests being answered now
and :attr:`StubServer.peak_in_flight` the most at once since the start (or :meth:`StubServer.reset_peak`);
:attr:`StubServer.chat_delay_s` holds each chat answer back that long, so concurrent callers overlap.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, cast

from pgrag_dag.providers.embedding import HashingEmbedder

Answer = Callable[[list[dict[str, str]]], str]
Route = Literal["chat", "embeddings", "any"]

# OpenAI's error ``type`` and ``code`` per status, as its API sends them
_ERROR_KINDS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    402: ("insufficient_quota", "insufficient_quota"),
    403: ("permission_error", "model_not_allowed"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


class StubStatus(Exception):
    """Raised by an ``answer`` callable: reply with HTTP ``status`` and ``message`` (OpenAI error body)."""

    def __init__(self, status: int, message: str = "") -> None:
        self.status = status
        super().__init__(message or f"stub refused with HTTP {status}")


class StubServer:
    """Context manager running the server in a daemon thread; ``base_url`` ends in ``/v1``."""

    def __init__(self, answer: Answer, *, embedding_dim: int = 384) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.embedder = HashingEmbedder(embedding_dim)
        self.cut_streams_after: int | None = None
        """Pieces a streamed answer gets before its connection is closed (``None``: the whole answer)."""
        self.refusals: dict[str, tuple[StubStatus, int]] = {}
        """Route (``chat`` / ``embeddings``) → (the refusal its requests get, requests still answered
        before it starts) (:meth:`refuse`)."""
        self.chat_delay_s = 0.0
        """Seconds every chat request is held before it is answered (0: at once)."""
        self.in_flight = 0
        """Requests (any route) received and not yet answered."""
        self.peak_in_flight = 0
        """The largest :attr:`in_flight` seen since the server started or :meth:`reset_peak`."""
        self._lock = threading.Lock()
        self._flight = threading.Condition()  # guards in_flight and peak_in_flight; notified when they change
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = cast(tuple[str, int], self._httpd.server_address[:2])
        return f"http://{host}:{port}/v1"

    def refuse(self, status: int, message: str = "", *, route: Route = "any", after: int = 0) -> None:
        """Answer every later request of ``route`` — past the next ``after``, answered normally — with HTTP
        ``status`` and ``message`` (an OpenAI-style ``{"error": {"message", "type", "code"}}`` body),
        until :meth:`accept`."""
        with self._lock:
            for r in ("chat", "embeddings") if route == "any" else (route,):
                self.refusals[r] = (StubStatus(status, message), after)

    def _refusal(self, route: str) -> StubStatus | None:
        """The refusal this request of ``route`` gets, if any (counting down :meth:`refuse`'s ``after``)."""
        with self._lock:
            if route not in self.refusals:
                return None
            refusal, after = self.refusals[route]
            if after > 0:
                self.refusals[route] = (refusal, after - 1)
                return None
            return refusal

    def reset_peak(self) -> int:
        """Start counting :attr:`peak_in_flight` afresh (from the requests in flight now); returns the old
        peak."""
        with self._flight:
            old, self.peak_in_flight = self.peak_in_flight, self.in_flight
            return old

    def _enter(self) -> None:
        with self._flight:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            self._flight.notify_all()

    def _leave(self) -> None:
        with self._flight:
            self.in_flight -= 1
            self._flight.notify_all()

    def wait_in_flight(self, count: int, *, timeout_s: float = 5.0) -> bool:
        """Wait until exactly ``count`` requests are in flight; ``False`` after ``timeout_s`` seconds. A
        client has its answer before the server's handler has finished (the counter drops after the
        response is written), so a test waits for the counter rather than reading it at once."""
        with self._flight:
            return self._flight.wait_for(lambda: self.in_flight == count, timeout=timeout_s)

    def accept(self) -> None:
        """Stop refusing (:meth:`refuse`): answer every route normally again."""
        with self._lock:
            self.refusals.clear()

    def __enter__(self) -> StubServer:
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

            def _refuse(self, refusal: StubStatus) -> None:
                kind, code = _ERROR_KINDS.get(refusal.status, ("server_error", None))
                self._send(
                    refusal.status,
                    {"error": {"message": str(refusal), "type": kind, "code": code, "param": None}},
                )

            def _stream(self, body: dict[str, Any], text: str, prompt_chars: int) -> None:
                """The answer as OpenAI's server-sent events (see the module docstring); the connection
                closes after ``[DONE]`` (HTTP/1.0)."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                head = {
                    "id": f"chatcmpl-stub-{len(server.requests)}",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": body.get("model", "stub"),
                }
                pieces = re.findall(r"\S+\s*|\s+", text) or [""]
                for i, piece in enumerate(pieces):
                    if server.cut_streams_after is not None and i >= server.cut_streams_after:
                        return  # HTTP/1.0: the connection closes mid-answer
                    delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
                    self._event({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
                self._event(
                    {
                        **head,
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                        "usage": {
                            "prompt_tokens": prompt_chars // 4,
                            "completion_tokens": len(text) // 4,
                            "total_tokens": (prompt_chars + len(text)) // 4,
                        },
                    }
                )
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def _event(self, payload: dict[str, Any]) -> None:
                self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
                self.wfile.flush()

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                server._enter()
                try:
                    self._post()
                finally:
                    server._leave()

            def _post(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append({"path": self.path, "body": body})
                route = "embeddings" if self.path.endswith("/embeddings") else "chat"
                refusal = server._refusal(route)
                if refusal is not None:
                    self._refuse(refusal)
                    return
                if self.path.endswith("/embeddings"):
                    inputs = body.get("input", [])
                    inputs = [inputs] if isinstance(inputs, str) else inputs
                    data = [
                        {"object": "embedding", "index": i, "embedding": v.tolist()}
                        for i, v in enumerate(server.embedder.embed(inputs))
                    ]
                    self._send(
                        200,
                        {
                            "object": "list",
                            "data": data,
                            "model": body.get("model", "stub"),
                            "usage": {"prompt_tokens": 0, "total_tokens": 0},
                        },
                    )
                    return
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if server.chat_delay_s > 0:
                    time.sleep(server.chat_delay_s)
                try:
                    text = server.answer(body.get("messages", []))
                except StubStatus as exc:
                    self._refuse(exc)
                    return
                except LookupError as exc:
                    self._send(404, {"error": {"message": str(exc), "type": "not_found"}})
                    return
                except Exception as exc:
                    self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})
                    return
                prompt_chars = sum(len(m.get("content") or "") for m in body.get("messages", []))
                if body.get("stream"):
                    self._stream(body, text, prompt_chars)
                    return
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-stub-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", "stub"),
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": text},
                            }
                        ],
                        "usage": {
                            "prompt_tokens": prompt_chars // 4,
                            "completion_tokens": len(text) // 4,
                            "total_tokens": (prompt_chars + len(text)) // 4,
                        },
                    },
                )

        return Handler
