"""HTTP routes of the collector, one module per resource."""
