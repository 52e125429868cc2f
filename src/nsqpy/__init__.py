"""nsqpy: NSQ, the realtime distributed messaging platform, rebuilt in Python."""

from nsqpy._version import __version__

__all__ = ["__version__"]
