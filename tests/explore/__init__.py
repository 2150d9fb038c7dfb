"""A deterministic interleaving explorer for many coordinators on one transaction.

``python -m tests.explore`` runs seeded schedules (see :mod:`.schedule`) through the
explorer's own driver (see :mod:`.interleave`): every participant's protocol step,
interleaved on one thread in the order a seeded policy picks. It checks the issue's
invariants after a final sweep (see :mod:`.model`) and prints a one-line replay for
every failure, shrunk when possible. ``--exhaustive`` enumerates every schedule of a
small configuration within a preemption bound.
"""
