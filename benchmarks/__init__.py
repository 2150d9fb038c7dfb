"""Benchmarks of ddbtx on the local emulators: request counts, round trips, locks,
cold start and contention. Each module prints plain-text tables; run one with
``python -m benchmarks.<name>`` or all of them with ``python -m benchmarks``.
"""
