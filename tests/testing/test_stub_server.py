"""The stub server's in-flight counter (issue 18 item 2): concurrent chat requests are counted while they
are held (by the answer, or by ``chat_delay_s``), the peak is the most at once, and it can be reset."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

from pgrag_dag.testing.stub_server import StubServer


def _chat(url: str) -> str:
    req = urllib.request.Request(
        f"{url}/chat/completions",
        method="POST",
        headers={"Content-Type": "application/json"},
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())["choices"][0]["message"]["content"]


def test_the_in_flight_counter_sees_concurrent_requests_and_its_peak_resets() -> None:
    with StubServer(lambda messages: "ok") as server:
        assert _chat(server.base_url) == "ok"
        # the client has its answer before the handler thread leaves: wait (bounded) for the counter to drop
        assert server.wait_in_flight(0) and server.peak_in_flight == 1  # one at a time
        # each of the three answers waits at a barrier until all three requests are being answered, so they
        # overlap however slowly the threads start (a delay would only make that likely); the barrier's
        # action runs while every handler is inside it, before any has left
        seen: list[int] = []
        barrier = threading.Barrier(3, action=lambda: seen.append(server.in_flight), timeout=10)

        def held(messages: list[dict[str, str]]) -> str:
            barrier.wait()
            return "ok"

        server.answer = held
        answers: list[str] = []
        threads = [threading.Thread(target=lambda: answers.append(_chat(server.base_url))) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=15)
        assert seen == [3]  # all three were held at once
        assert answers == ["ok"] * 3 and server.wait_in_flight(0) and server.peak_in_flight == 3
        assert server.reset_peak() == 3 and server.peak_in_flight == 0
        server.answer = lambda messages: "ok"
        _chat(server.base_url)
        assert server.peak_in_flight == 1  # the peak is raised on arrival, before the answer is sent


def test_chat_delay_holds_each_answer_back_while_it_is_counted() -> None:
    with StubServer(lambda messages: "ok") as server:
        server.chat_delay_s = 0.3
        seen: list[int] = []

        def answer(messages: list[dict[str, str]]) -> str:
            seen.append(server.in_flight)  # the handler's own request, counted while it is held
            return "ok"

        server.answer = answer
        t0 = time.monotonic()
        assert _chat(server.base_url) == "ok"
        assert time.monotonic() - t0 >= 0.3 and seen == [1]
        assert server.wait_in_flight(0)
