"""nsqlookupd: registry, TCP V1 protocol, HTTP API and the command."""
