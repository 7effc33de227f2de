"""The adapter seam: what a platform adapter implements and what the core offers it (the
platform registry, access and pairing on intake, the retry helper for platform calls, the live
preview and the connection supervisor a platform runs on its own wire primitives)."""
