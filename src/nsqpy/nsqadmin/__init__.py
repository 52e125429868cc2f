"""nsqadmin: the web UI and JSON API over an NSQ cluster."""
