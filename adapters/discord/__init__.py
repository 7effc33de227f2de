"""Discord: a discord.py client on the gateway's loop, messages and slash commands."""
