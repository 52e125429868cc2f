"""Command-line applications: they parse options and call the library."""
