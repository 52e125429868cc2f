"""Per-connection client state as the channel sees it (no I/O).

The TCP adapter owns one ``ClientState`` per connection and gives it ``write_message``, the
function that frames a delivered message into the connection's output buffer.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Final, Protocol

from nsqpy._internal.compiled import load
from nsqpy.nsqd.core.message import Message

# nsqd's client states; the numbers appear in /stats as "state".
STATE_INIT: Final = 0
STATE_DISCONNECTED: Final = 1
STATE_CONNECTED: Final = 2
STATE_SUBSCRIBED: Final = 3
STATE_CLOSING: Final = 4


class ClientState:
    """RDY window, in-flight messages and counters of one consumer connection.

    ``in_flight`` maps id -> message in delivery (and TOUCH) order. Every message of a client
    gets the same timeout, so that order is also deadline order and expiry only looks at the
    front; the rare deadline shortened by the max-msg-timeout cap is tracked in ``capped``.
    """

    __slots__ = (
        "capped",
        "channel",
        "client_id",
        "connect_ts",
        "finish_count",
        "id",
        "in_flight",
        "in_ready",
        "message_count",
        "msg_timeout",
        "rdy",
        "requeue_count",
        "sample_rate",
        "state",
        "writable",
        "write_message",
        "write_messages",
    )

    def __init__(
        self,
        client_id: int,
        write_message: Callable[[Message], None],
        write_messages: Callable[[list[Message]], None] | None = None,
        *,
        msg_timeout: float = 60.0,
        connect_ts: int = 0,
    ) -> None:
        self.id = client_id
        self.client_id = ""
        self.write_message = write_message
        #: A run of deliveries at once (the channel's publish path); one write_message call
        #: per message unless the adapter has something faster.
        self.write_messages = write_messages or _one_by_one(write_message)
        self.msg_timeout = msg_timeout
        self.connect_ts = connect_ts
        self.state: int = STATE_INIT
        self.rdy = 0
        self.in_flight: MutableMapping[bytes, Message] = _new_in_flight()
        self.capped: set[bytes] = set()
        self.in_ready = False  # queued in its channel's ready deque
        self.writable = True  # False while the transport's write buffer is over its mark
        self.channel: Subscription | None = None
        self.sample_rate = 0
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0

    def is_ready(self) -> bool:
        return self.rdy > len(self.in_flight) and self.writable


class Subscription(Protocol):
    """The channel a client subscribed to, as its connection and the broker reach it.

    ``Channel`` is one; naming only this keeps ``client`` below ``channel`` (which holds
    clients) in the import graph.
    """

    @property
    def topic_name(self) -> str: ...

    @property
    def name(self) -> str: ...

    def client_ready(self, client: ClientState, now: float) -> None: ...

    def set_rdy(self, client: ClientState, count: int, now: float) -> None: ...

    def finish(self, client: ClientState, msg_id: bytes, now: float) -> None: ...

    def finish_many(
        self, client: ClientState, ids: list[bytes], now: float
    ) -> list[tuple[bytes, str]]: ...

    def requeue(self, client: ClientState, msg_id: bytes, delay: float, now: float) -> None: ...

    def touch(self, client: ClientState, msg_id: bytes, now: float) -> None: ...

    def remove_client(self, client: ClientState, now: float) -> bool: ...


def _one_by_one(write: Callable[[Message], None]) -> Callable[[list[Message]], None]:
    def write_all(msgs: list[Message]) -> None:
        for msg in msgs:
            write(msg)

    return write_all


# The compiled core's table of in-flight messages (``_cdelivery.InFlight``), or its twin,
# the dict: one per client, made here so that every ClientState has the same kind.
_c = load("nsqpy.nsqd.core._cdelivery")
_new_in_flight: Callable[[], MutableMapping[bytes, Message]] = dict if _c is None else _c.InFlight
