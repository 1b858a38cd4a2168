"""A checkpoint's history: manifests beside each object, listings, retention and clean-up.

Its own floor (pyproject's import-linter ``layers``): below ``checkpoint | sharded``, above
``lifecycle``; ``checkpoint.py`` calls into it, never the other way.
"""
