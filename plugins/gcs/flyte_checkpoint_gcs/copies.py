"""Server-side range copies (incremental saves): none on GCS, and why.

S3 (``UploadPartCopy`` with ``CopySourceRange``) and Azure (``Put Block From URL`` with a
source range) copy a byte range of one object into another on the server. Every GCS request
that copies on the server takes whole objects: ``objects.compose`` names its sources by
``name`` and ``generation`` only, ``objects.rewrite`` copies one whole object (its
``maxBytesRewrittenPerCall`` splits the work into calls, not the object into ranges), and the
XML API's copy takes a whole object too. A range of the previous checkpoint could become a
compose source only after the client downloaded it and uploaded it again, which moves more
bytes than the full save it would replace (measured: plugins/gcs/README.md, "Incremental saves:
not on GCS"). So the store declares no capability, and a save over an indexed object sends
every file, as on any store without it.
"""

from __future__ import annotations

from flyte_checkpoint.storage.blobstore import CopyLimits

#: No server-side range copy (see above): :attr:`GCSStore.copy_limits`.
LIMITS: CopyLimits | None = None

__all__ = ["LIMITS"]
