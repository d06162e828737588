"""Hostile input generated, not hand-picked: schemathesis over every route of /openapi.json and hypothesis
mutating valid ingest batches, each against a `gpuscope collector` process over a real PostgreSQL, in a
bounded number of deterministic examples (tests/hostile/conftest.py)."""
