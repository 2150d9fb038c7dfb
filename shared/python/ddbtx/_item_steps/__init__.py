"""The item-steps layer: what one coordinator does to one item and to its view of the
record, in the seeds' vocabulary: add (:mod:`.add`), lock (:mod:`.lock`), save image +
apply (:mod:`.apply`), a later write under the same lock (:mod:`.rewrite`), contention
for a held item (:mod:`.contention`). Every request to an item goes out through
:mod:`.writes`; :mod:`.view` is the coordinator's view of its TX record."""
