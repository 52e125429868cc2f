"""The package version (NSQ compatibility level is in nsqpy.protocol.constants)."""

__version__ = "0.1.0"
