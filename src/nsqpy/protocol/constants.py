"""Wire constants of NSQ's TCP protocol V2 (see NSQ_FEATURES.md §2)."""

from typing import Final

#: NSQ release whose wire protocol, HTTP API and flags nsqpy reproduces.
NSQ_VERSION: Final = "1.3.0"

MAGIC_V2: Final = b"  V2"

FRAME_TYPE_RESPONSE: Final = 0
FRAME_TYPE_ERROR: Final = 1
FRAME_TYPE_MESSAGE: Final = 2

OK: Final = b"OK"
HEARTBEAT: Final = b"_heartbeat_"
CLOSE_WAIT: Final = b"CLOSE_WAIT"

#: Message ids are 16 ASCII hex characters on the wire.
MSG_ID_LENGTH: Final = 16
#: timestamp(8) + attempts(2) + id(16): the smallest valid encoded message.
MIN_VALID_MSG_LENGTH: Final = 26

#: nsqd reads command lines through a 16 KiB buffer; a longer line is a read error.
MAX_LINE_LENGTH: Final = 16 * 1024

#: Commands that are followed by a `[4-byte size][body]`.
BODY_COMMANDS: Final = frozenset({b"IDENTIFY", b"AUTH", b"PUB", b"MPUB", b"DPUB"})
