"""Hostile input: what a stranger sends, a platform delivers or a runaway tool does, each case
against the real `hermes gateway run` process where it can be."""
