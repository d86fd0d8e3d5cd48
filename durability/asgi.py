"""ASGI pieces the plane and the ops service share: request bodies read under a cap.

:class:`BodyLimit` reads a request's body as the stream it arrives in and answers ``413`` as soon
as it passes the cap, chunked or not, declared or not, before the application sees a byte of it:
a body over the cap is never held whole, so no client can run a server out of memory. A body
within the cap reaches the application as one message, as if it had arrived at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """ASGI middleware refusing a request body over ``max_bytes`` with 413, while it streams in.

    Args:
        app: The application behind it.
        max_bytes: The largest body passed on.
        advice: What a refused client should do, appended to the 413's ``detail``.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, advice: str = "send a smaller body") -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes={max_bytes} must be positive")
        self.app = app
        self.max_bytes = max_bytes
        self.advice = advice

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send, f"the request body is {declared} bytes, over")
            return
        buffer = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left: nothing to answer
            buffer += message.get("body", b"")
            if len(buffer) > self.max_bytes:
                await self._refuse(send, "the request body runs past")
                return
            if not message.get("more_body", False):
                break
        body = bytes(buffer)
        buffer.clear()
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, what: str) -> None:
        detail = f"{what} this server's {self.max_bytes}-byte limit; {self.advice}"
        body = orjson.dumps({"detail": detail, "limit_bytes": self.max_bytes})
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and len(text) < 20 else None
    return None


__all__ = ["BodyLimit"]
