"""A deterministic interleaving explorer for many coordinators on one transaction.

``python -m tests.explore`` runs seeded schedules (see :mod:`.schedule`) through
one gate that orders every DynamoDB call (see :mod:`.gate`), checks the
issue's invariants after a final sweep (see :mod:`.model`), and prints a
one-line replay for every failure, shrunk when possible.
"""
