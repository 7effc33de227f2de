"""Watching the gateway itself: the loop-lag watchdog, the out-of-process sentinel that catches
a held GIL, and systemd's notifications."""
