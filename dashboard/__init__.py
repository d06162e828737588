"""The web UI (Plotly Dash): reads through the collector's query layer, never writes."""
