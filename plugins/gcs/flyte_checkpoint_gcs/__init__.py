"""Google Cloud Storage backend for flyte-checkpoint (``gs://`` and ``gcs://`` URIs).

Importing this package does not import the Google SDK: the store is built, and the
SDK imported, the first time a ``gs://`` or ``gcs://`` URI is used.
"""

from __future__ import annotations

__version__ = "0.1.0"
