"""Private helpers shared by the nsqpy daemons and utilities (not a public API)."""
