"""The stores layer: the one owner of each piece of shared state every party writes: the
TX record and its entry and body rows (:mod:`.record`, :mod:`.entry_rows`), exactly-once
aliases (:mod:`.alias`), and the completion steps every coordinator and janitor shares
(:mod:`.completion`: complete, undo, resolve, delete)."""
