"""Prometheus metrics, the HTTP endpoint (/metrics, /healthz, /readyz), usage events."""
