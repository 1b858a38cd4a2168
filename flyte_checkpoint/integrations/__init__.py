"""Integrations with the platform and frameworks around checkpoints.

- :mod:`flyte_checkpoint.integrations.flyte`: ``fc.ctx()`` inside Flyte v2 tasks (used by
  :func:`flyte_checkpoint.ctx` automatically when ``flyte`` is loaded).
- :mod:`flyte_checkpoint.integrations.lightning`: mirror Lightning's ``ModelCheckpoint``
  folder into a checkpoint, and find the file to resume from.

Importing this package imports no framework: each module imports its framework when it is
itself imported.
"""

from __future__ import annotations
