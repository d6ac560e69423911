"""The stub server's in-flight counter (issue 18 item 2): concurrent chat requests held by ``chat_delay_s``
are counted while they wait, the peak is the most at once, and it can be reset."""

from __future__ import annotations

import json
import threading
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
        assert server.wait_in_flight(0) and server.peak_in_flight == 1  # one at a time
        server.chat_delay_s = 0.5
        answers: list[str] = []
        threads = [threading.Thread(target=lambda: answers.append(_chat(server.base_url))) for _ in range(3)]
        for t in threads:
            t.start()
        assert server.wait_in_flight(3)  # all three are held at once
        for t in threads:
            t.join()
        assert answers == ["ok"] * 3 and server.wait_in_flight(0) and server.peak_in_flight == 3
        assert server.reset_peak() == 3 and server.peak_in_flight == 0
        server.chat_delay_s = 0
        _chat(server.base_url)
        assert server.peak_in_flight == 1
