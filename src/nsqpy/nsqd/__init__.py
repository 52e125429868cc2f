"""nsqd: the NSQ broker.

``core/`` is the domain (no I/O), ``storage/`` the disk, ``observe/`` stats and metrics,
``server/`` the TCP/HTTP adapters; ``options`` holds the flags and ``app`` wires it all into
the daemon. Each sub-package's docstring says what it may import; ``make imports`` checks it.
The package imports ``protocol`` and ``_internal`` only, never the client or the tools.
"""
