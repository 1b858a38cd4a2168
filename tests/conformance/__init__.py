"""The conformance suites run against a small toy network store, correct and deliberately broken."""
