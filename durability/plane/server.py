"""Serving the plane: ``durability plane serve``, and a plane on a background thread (tests, notebooks).

:func:`serve_in_thread` binds a socket first (port 0 picks a free one), then runs uvicorn on a
daemon thread, so the URL is known before the first request and :meth:`RunningPlane.stop` ends it.
uvicorn's request-line limit is raised so a 10 KB execution id, percent-encoded, still fits.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

#: Bytes of an incomplete HTTP event (request line and headers) uvicorn accepts.
MAX_REQUEST_HEAD = 1024 * 1024


def server_config(app: Any, *, host: str, port: int, log_level: str = "warning") -> Any:
    """The uvicorn configuration the plane runs with."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="off",
        h11_max_incomplete_event_size=MAX_REQUEST_HEAD,
        timeout_keep_alive=30,
        access_log=False,
    )


@dataclass
class RunningPlane:
    """A plane served on a background thread; ``url`` is its base URL."""

    url: str
    server: Any
    thread: threading.Thread
    sock: socket.socket

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and wait for the thread."""
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()

    def __enter__(self) -> RunningPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_in_thread(
    app: Any, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "critical"
) -> RunningPlane:
    """Serve the ASGI ``app`` with uvicorn on a daemon thread; returns once it accepts requests."""
    import uvicorn

    # IPPROTO_TCP explicitly: asyncio disables Nagle only on sockets whose proto says TCP, and
    # accepted sockets inherit this one's (proto 0 costs every keep-alive answer a 40 ms
    # delayed-ACK stall on loopback).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    server = uvicorn.Server(server_config(app, host=host, port=bound, log_level=log_level))
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"plane:{bound}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the plane on {host}:{bound} did not start")
        time.sleep(0.01)
    return RunningPlane(f"http://{host}:{bound}", server, thread, sock)
