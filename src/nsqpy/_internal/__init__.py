"""Private helpers shared by the nsqpy daemons and utilities (not a public API).

Go-compatible flag parsing, durations, JSON and number formatting, logging, listening sockets,
the HTTP router and V1 envelope, Prometheus text, and running a daemon on one loop. It is the
bottom layer: it imports the standard library and third-party packages only, never another
nsqpy package (checked by ``make imports``).
"""
