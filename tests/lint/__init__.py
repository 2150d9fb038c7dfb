"""Checks of the core's source that `make lint` runs (python -m tests.lint.<name>)."""
