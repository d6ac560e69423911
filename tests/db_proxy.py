"""A TCP proxy in front of the test PostgreSQL, whose :meth:`DbProxy.cut` makes the database "go away".

The embedded server listens on a unix socket (its DSN has ``host=/path``); the proxy listens on
``127.0.0.1:<free port>`` and forwards every connection to that socket (or to a TCP server when
``PGRAG_TEST_DATABASE_URL`` names one). ``cut()`` closes every forwarded connection and stops
listening, so a client sees its connection drop and a new one refused; ``restore()`` listens again on
the same port.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo


class DbProxy:
    """Context manager: ``dsn`` is the upstream DSN with host and port replaced by the proxy's."""

    def __init__(self, upstream_dsn: str) -> None:
        parts = conninfo_to_dict(upstream_dsn)
        host, port = str(parts.get("host") or "/tmp"), int(parts.get("port") or 5432)
        self._upstream: tuple[int, Any] = (
            (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
            if host.startswith("/")
            else (socket.AF_INET, (host, port))
        )
        self.port = 0
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listen()
        self.dsn = make_conninfo(upstream_dsn, host="127.0.0.1", port=str(self.port))

    def __enter__(self) -> DbProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True, name="db-proxy-accept").start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # the listener was closed by cut()
                return
            family, address = self._upstream
            server = socket.socket(family, socket.SOCK_STREAM)
            try:
                server.connect(address)
            except OSError:
                client.close()
                server.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    server.close()
                    return
                self._sockets |= {client, server}
            for src, dst in ((client, server), (server, client)):
                threading.Thread(
                    target=self._pump, args=(src, dst), daemon=True, name="db-proxy-pump"
                ).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            self._close(s)

    def _close(self, s: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(s)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def cut(self) -> None:
        """Close every forwarded connection and stop accepting: new connections are refused."""
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = list(self._sockets), set()
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            except OSError:
                pass
            listener.close()
        for s in sockets:
            self._close(s)

    def restore(self) -> None:
        """Accept connections again, on the same port."""
        with self._lock:
            if self._listener is not None:
                return
        self._listen()

    def connections(self) -> int:
        """Forwarded connections open now."""
        with self._lock:
            return len(self._sockets) // 2
