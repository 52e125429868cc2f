"""Client exceptions: one root, wire errors by their E_* code, transport failures apart."""

from __future__ import annotations

from typing import Final

from nsqpy.protocol.errors import NON_FATAL_CODES


class NSQError(Exception):
    """Root of every error the client raises."""


class ConnectionClosedError(NSQError):
    """The connection closed (or failed) before the command was answered."""


class ProtocolError(NSQError):
    """The server sent bytes this client cannot make sense of; the connection is dropped."""


class NotConnectedError(NSQError):
    """No nsqd could be reached for the command."""


class ServerError(NSQError):
    """nsqd answered a command with an error frame: ``code`` is its ``E_*`` word."""

    def __init__(self, code: str, desc: str) -> None:
        super().__init__(f"{code} {desc}".rstrip())
        self.code = code
        self.desc = desc

    @property
    def fatal(self) -> bool:
        """nsqd closes the connection after every error except FIN/REQ/TOUCH failures."""
        return self.code not in NON_FATAL_CODES

    @classmethod
    def from_frame(cls, data: bytes) -> ServerError:
        text = data.decode("utf-8", "replace")
        code, _, desc = text.partition(" ")
        return _BY_CODE.get(code, ServerError)(code, desc)


class InvalidError(ServerError):
    """E_INVALID and the E_BAD_* family: the request itself was wrong."""


class AuthError(ServerError):
    """E_AUTH_* and E_UNAUTHORIZED."""


class PublishError(ServerError):
    """E_PUB_FAILED / E_MPUB_FAILED / E_DPUB_FAILED: nsqd could not take the message."""


class LeaseError(ServerError):
    """A lease command refused by nsqd (an nsqpy extension); nsqd keeps the connection.

    ``gone`` is true when the lease no longer holds its messages: finished, requeued or
    expired, or unknown (never taken, forgotten, or lost with a restart)."""

    @property
    def fatal(self) -> bool:
        return False

    @property
    def gone(self) -> bool:
        return self.code in LEASE_GONE_CODES


#: The lease is not there (any more) to be read.
LEASE_GONE_CODES: Final = frozenset({"E_LEASE_NOT_FOUND", "E_LEASE_FINISHED", "E_LEASE_REQUEUED"})

_BY_CODE: Final[dict[str, type[ServerError]]] = {
    "E_INVALID": InvalidError,
    "E_BAD_BODY": InvalidError,
    "E_BAD_TOPIC": InvalidError,
    "E_BAD_CHANNEL": InvalidError,
    "E_BAD_MESSAGE": InvalidError,
    "E_PUB_FAILED": PublishError,
    "E_MPUB_FAILED": PublishError,
    "E_DPUB_FAILED": PublishError,
    "E_AUTH_FAILED": AuthError,
    "E_AUTH_FIRST": AuthError,
    "E_AUTH_DISABLED": AuthError,
    "E_UNAUTHORIZED": AuthError,
    **dict.fromkeys(LEASE_GONE_CODES, LeaseError),
    "E_LEASE_MISMATCH": LeaseError,
    "E_TOPIC_NOT_FOUND": LeaseError,
    "E_CHANNEL_NOT_FOUND": LeaseError,
    "E_EPHEMERAL_CHANNEL": LeaseError,
}
