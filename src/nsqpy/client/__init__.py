"""The nsqpy client: asyncio ``Producer`` and ``Consumer`` (blocking versions in ``.sync``).

::

    async with Producer("127.0.0.1:4150") as producer:
        await producer.publish("events", b"hello")

    async def handle(msg: Message) -> None:
        print(msg.body)

    consumer = Consumer("events", "archive", lookupd_http_addresses="127.0.0.1:4161",
                        handler=handle, max_in_flight=100)
    await consumer.start()

It may import ``protocol`` and ``_internal`` only (no daemon, no tools): ``tools``, ``cli``,
``spark`` and ``nsqadmin``'s callers build on it.
"""

from nsqpy.client.config import Config
from nsqpy.client.consumer import Consumer
from nsqpy.client.dead_letters import EffectiveConfig, QueueConfig, RedriveResult
from nsqpy.client.errors import (
    AuthError,
    ConnectionClosedError,
    InvalidError,
    NotConnectedError,
    NSQError,
    ProtocolError,
    PublishError,
    ServerError,
)
from nsqpy.client.http import HTTPError, NsqdHTTPClient
from nsqpy.client.message import Message
from nsqpy.client.producer import Producer

__all__ = [
    "AuthError",
    "Config",
    "ConnectionClosedError",
    "Consumer",
    "EffectiveConfig",
    "HTTPError",
    "InvalidError",
    "Message",
    "NSQError",
    "NotConnectedError",
    "NsqdHTTPClient",
    "Producer",
    "ProtocolError",
    "PublishError",
    "QueueConfig",
    "RedriveResult",
    "ServerError",
]
