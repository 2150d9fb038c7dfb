"""The coordinator layer: one transaction as steps (:mod:`.steps`), its end (:mod:`.ending`:
commit, complete, roll back), the sync driver's :class:`~.transaction.Transaction`, what
both managers are made of (:mod:`.manager_core`, :mod:`.manager_steps`,
:mod:`.manager_reads`), isolated reads' plans, exactly-once ids and the one-call
``TransactWriteItems`` path."""
