"""Observation: Prometheus metrics, the step trace, the engine view, the health port and
the built-in web pages."""
