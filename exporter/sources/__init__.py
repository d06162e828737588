"""Telemetry sources: each reads one kind of hardware (or the simulator) into readings."""
