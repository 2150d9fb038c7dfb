"""``python -m benchmarks``: every benchmark (see :mod:`benchmarks.all`)."""

from .all import main

main()
