"""Slack: a slack-bolt app fed by Socket Mode or the Events API."""
