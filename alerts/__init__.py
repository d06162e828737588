"""Alert rules over SQL views, Prometheus-style states, Alertmanager-style routing, delivery to chat
webhooks; a collector part (part.py)."""
