"""Flyte's own checkpoint tests, adapted to this library (one module per upstream file).

Each module names the upstream repository, path and commit; each adaptation is a comment on
its line. A test that checks a difference documented in docs/flyte.md is decorated with
:func:`tests.upstream.differences.documented_difference`: it passes only while Flyte's test
fails with the documented error (the suite's CI rule turns an ``xfail`` into a failure).
"""
