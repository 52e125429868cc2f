"""Topic and channel names: ``^[.a-zA-Z0-9_-]+(#ephemeral)?$``, 1 to 64 bytes."""

import re
from typing import Final

_NAME: Final = re.compile(rb"[.a-zA-Z0-9_-]+(?:#ephemeral)?")
_NAME_STR: Final = re.compile(r"[.a-zA-Z0-9_-]+(?:#ephemeral)?")
EPHEMERAL_SUFFIX: Final = "#ephemeral"


def is_valid_name(name: bytes | str) -> bool:
    """True for a valid topic or channel name (the same rule applies to both)."""
    if not 1 <= len(name) <= 64:
        return False
    if isinstance(name, bytes):
        return _NAME.fullmatch(name) is not None
    return _NAME_STR.fullmatch(name) is not None and name.isascii()


def is_ephemeral(name: str) -> bool:
    return name.endswith(EPHEMERAL_SUFFIX)
