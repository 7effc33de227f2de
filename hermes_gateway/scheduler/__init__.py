"""Scheduled jobs: agent turns that run on a schedule and deliver their answer to a chat.

`schedule` parses and computes slots, `ledger` keeps jobs and runs in the store, `scheduler`
ticks, claims and runs them, `routes` and `chat` are the operator's and the chat's views.
"""
