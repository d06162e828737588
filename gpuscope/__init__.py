"""gpuscope: GPU cluster telemetry. Installed, every part lives under this name (docs/architecture.md);
this folder itself holds the bottom layer (core/) and the composition root (cli, demo, bench, *_process)."""
