"""The apps layer's parts of the ``ddbtx`` command (:mod:`ddbtx.cli`): one-line answers to
ordinary mistakes (:mod:`.errors`) and the sweep's live display (:mod:`.progress`)."""
