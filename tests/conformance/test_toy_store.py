"""The suites pass the correct toy store (so a failure on a broken one is the break's doing)."""

from __future__ import annotations

from .classes import ToyParts, ToyWhole, in_place_endpoint, toy_endpoint

__all__ = ["in_place_endpoint", "toy_endpoint"]


class TestToyParts(ToyParts):
    pass


class TestToyWhole(ToyWhole):
    pass
