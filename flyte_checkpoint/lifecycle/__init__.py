"""The life of a save, between ``Checkpoint`` and the bytes: its turn among saves to one
destination (:mod:`.saveorder`), background saves (:mod:`.background`) of a snapshot of the
data (:mod:`.snapshot`), the final save on SIGTERM (:mod:`.preemption`,
:mod:`.signalrelay`, :mod:`.handlerchain`) and the local runner's named runs (:mod:`.runs`).

It imports ``format``, ``storage``, ``util`` and the public base modules, never the API above it
(``checkpoint``, ``context``): see CONTRIBUTING.md, "The layers".
"""
