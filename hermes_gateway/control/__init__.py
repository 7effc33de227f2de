"""The control server: health, readiness, status and metrics, the operator's routes, and the
connection bounds that keep the port safe to expose."""
