"""The daemon's spine: events and the bus, the runner and its sessions, settle, delivery,
replay and the chat commands (the path of one message once it is admitted)."""
