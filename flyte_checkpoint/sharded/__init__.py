"""Sharded saves: every rank of a distributed job saves its own folder into one checkpoint.

``save_sharded(checkpoint, folder)`` on every rank writes one object, a gzip tar of the union
of the ranks' folders with one index, committed once every rank has written its part;
``load_sharded(checkpoint, own=...)`` restores the whole tree or this rank's files. See
docs/sharded.md and docs/FORMAT.md.
"""

from .api import load_sharded, save_sharded

__all__ = ["load_sharded", "save_sharded"]
