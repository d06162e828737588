"""Central collector: ingest API, storage in PostgreSQL, the query layer and the read API."""
