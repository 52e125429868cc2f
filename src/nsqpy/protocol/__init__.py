"""Sans-IO NSQ wire protocol: bytes in, values out.

Nothing in this package imports asyncio, socket or time; the daemons, the client and the
test tools share it. Layouts are documented in each module. It imports only the standard
library and the codecs (cramjam, crc32c); ``make imports`` checks that it stays sans-IO.
"""
