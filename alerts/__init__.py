"""Alert rules over SQL, Alertmanager-style routing, and delivery to chat webhooks (not built yet)."""
