"""Telegram: python-telegram-bot 22 on the gateway's loop (long polling or webhook)."""
