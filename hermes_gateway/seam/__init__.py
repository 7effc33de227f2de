"""The adapter seam: what a platform adapter implements and what the core offers it (the
adapter import through a platform's spec, access and pairing on intake, the retry helper for
platform calls)."""
