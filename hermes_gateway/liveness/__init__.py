"""Watching the gateway itself: the loop-lag watchdog, the out-of-process sentinel that catches
a held GIL, systemd's notifications, and a stop asked for before the event loop runs."""
