"""A Dovecot of the test's own for the email adapter's tests (skipped where it is missing)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adapters.mail.servers import Dovecot, have_dovecot

BOT, BOT_PW = "bot@bot.test", "bot-secret"


@pytest.fixture
def dovecot() -> Iterator[Dovecot]:
    if not have_dovecot():
        pytest.skip("needs dovecot (apt-get install dovecot-imapd)")
    root = Path(tempfile.mkdtemp(prefix="hermes-mail-", dir="/tmp"))  # short socket paths
    server = Dovecot(root, {BOT: BOT_PW}).start()
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)
