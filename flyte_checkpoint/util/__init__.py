"""Small pieces every floor above may use, importing only the public base modules (``errors``,
``uri``...): paths and attempt numbers (:mod:`.paths`), load limits (:mod:`.limits`), the retry
policy (:mod:`.retry`), the loggers (:mod:`.logs`), sparse files (:mod:`.sparse`), the library's
working-file names (:mod:`.workfiles`), folders held by a live process
(:mod:`.heldfolders`), install hints (:mod:`.install`), interrupts in worker
threads (:mod:`.interrupts`), cancelled operations (:mod:`.cancellation`), what a forked child
makes afresh (:mod:`.forksafe`), the files a save reads, checked unchanged (:mod:`.sources`),
what a save did in figures (:mod:`.transfers`).
A backend's own code takes the last three's names from :mod:`flyte_checkpoint.storage.kit`.
See CONTRIBUTING.md, "The layers".
"""
