"""The agent's browser: one Chromium driven by Playwright on a thread of its own, a context per
session, every connection through the SSRF guard (docs/browser.md)."""
