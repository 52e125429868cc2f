"""A message as a consumer sees it, with the three ways to answer it."""

from __future__ import annotations

from typing import Protocol


class Responder(Protocol):
    """The connection a message came on, as the message sees it: where its answers go.

    ``NsqdConnection`` is one; naming only this keeps ``message`` below ``connection``.
    """

    @property
    def address(self) -> str: ...

    @property
    def topic(self) -> str: ...

    @property
    def channel(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def finish(self, msg: Message) -> None: ...

    def requeue(self, msg: Message, delay: float | None, *, backoff: bool) -> None: ...

    def touch(self, msg: Message) -> None: ...


class Message:
    """One delivery of a message: answer it once with finish(), requeue() or (repeatedly) touch().

    ``id`` is the 16-byte hex id as sent on the wire, ``timestamp`` the publish time in ns,
    ``attempts`` how many times nsqd has delivered it (this delivery included).
    """

    __slots__ = (
        "_auto_response",
        "_conn",
        "attempts",
        "body",
        "id",
        "responded",
        "timestamp",
        "touch_handle",
    )

    def __init__(
        self, conn: Responder, msg_id: bytes, body: bytes, timestamp: int, attempts: int
    ) -> None:
        self._conn = conn
        self.id = msg_id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self.responded = False
        self._auto_response = True
        #: the auto-TOUCH timer while a handler holds the message (see Consumer)
        self.touch_handle: object = None

    @property
    def nsqd_address(self) -> str:
        """host:port of the nsqd that delivered it (where FIN/REQ/TOUCH must go)."""
        return self._conn.address

    @property
    def topic(self) -> str:
        return self._conn.topic

    @property
    def channel(self) -> str:
        return self._conn.channel

    @property
    def auto_response(self) -> bool:
        return self._auto_response

    def disable_auto_response(self) -> None:
        """The handler's return will not FIN the message; the caller answers it later."""
        self._auto_response = False

    def finish(self) -> None:
        """FIN: the message is done and nsqd forgets it."""
        if self.responded:
            return
        self.responded = True
        self._conn.finish(self)

    def requeue(self, delay: float | None = None, *, backoff: bool = True) -> None:
        """REQ: deliver again after ``delay`` seconds (None: the consumer's policy)."""
        if self.responded:
            return
        self.responded = True
        self._conn.requeue(self, delay, backoff=backoff)

    def touch(self) -> None:
        """TOUCH: reset this delivery's timeout while the handler keeps working."""
        if not self.responded:
            self._conn.touch(self)

