"""The live dashboard served on the control port under `/dashboard/` (see docs/dashboard.md)."""

from hermes_gateway.dashboard.app import Dashboard

__all__ = ["Dashboard"]
