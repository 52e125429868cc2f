"""nsqlookupd: the discovery daemon (registration DB, TCP V1 server, HTTP API)."""
