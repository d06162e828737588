"""The ingest path: decoding and validating pushed batches (docs/ingest-format.md)."""
