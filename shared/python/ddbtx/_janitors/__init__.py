"""The janitors' parts (public-API layer, beside :mod:`ddbtx.sweeper` and
:mod:`ddbtx.recovery`): the sweep's scan pass (:mod:`.scan`) and its state, cursor and
report (:mod:`.state`)."""
