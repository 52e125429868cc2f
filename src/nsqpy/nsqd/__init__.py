"""nsqd: the NSQ broker (domain objects, TCP and HTTP adapters, and the daemon)."""
