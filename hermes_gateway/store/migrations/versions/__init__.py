"""One revision of the store's schema per file, oldest first (`revision` / `down_revision`)."""
