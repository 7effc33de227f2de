"""The operator's command line (`hermes ...`): run, install and inspect the gateway, chat, logs,
pairing, the inbox and the database."""
