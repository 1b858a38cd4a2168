"""The checkpoint object's format: a gzip tar of a folder's entries (or bytes as they are), written
and read as streams. It may use :mod:`flyte_checkpoint.storage`; storage never imports it."""
