"""The local API platform: an OpenAI-compatible chat-completions endpoint on the control port."""
