"""gpuscope: GPU cluster telemetry. This package holds the command line and the demo wiring."""
