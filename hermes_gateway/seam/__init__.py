"""The adapter seam: what a platform adapter implements and what the core offers it (the
adapter import through a platform's spec, the intake every message takes, access and pairing
on intake, the one attachment downloader, the retry helper for platform calls, the live
preview and the connection supervisor a platform runs on its own wire primitives)."""
