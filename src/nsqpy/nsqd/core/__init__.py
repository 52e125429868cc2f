"""nsqd's domain: topics, channels, messages, client state, dead-letter policy, redrive, ids.

Everything here is plain data and logic: no sockets, no asyncio, no files, no clock of its own
(time and configuration are passed in). It may import ``nsqpy.protocol`` and ``nsqpy._internal``
only. It talks to storage through the interface it owns (``core.backend``: ``Backend`` and
``DiskHooks``) and the message record codec (``core.records``); storage implements that
interface, never the other way round.
"""
