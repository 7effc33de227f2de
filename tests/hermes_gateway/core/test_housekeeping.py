"""Housekeeping: downloaded media past its retention is removed, nothing else is."""

from __future__ import annotations

import os
import time
from pathlib import Path

from hermes_gateway.core.housekeeping import Housekeeper, prune_media
from tests.fakes.openai import FakeOpenAI
from tests.harness import make_config, running_gateway

DAY = 86400


def _file(path: Path, age_days: float) -> Path:
    path.write_bytes(b"x")
    then = time.time() - age_days * DAY
    os.utime(path, (then, then))
    return path


def test_only_regular_files_older_than_the_retention_go(tmp_path: Path) -> None:
    media = tmp_path / "media"
    media.mkdir()
    old = _file(media / "old.jpg", 8)
    fresh = _file(media / "fresh.jpg", 1)
    keep_dir = media / "sub"
    keep_dir.mkdir()
    os.utime(keep_dir, (time.time() - 30 * DAY,) * 2)
    outside = _file(tmp_path / "outside.txt", 30)
    link = media / "link"
    link.symlink_to(outside)
    assert prune_media(media, 7) == 1
    assert not old.exists()
    assert fresh.exists() and keep_dir.exists() and link.is_symlink() and outside.exists()


def test_a_missing_media_folder_is_not_an_error(tmp_path: Path) -> None:
    assert prune_media(tmp_path / "never-created", 7) == 0


async def test_the_sweep_prunes_media_with_the_configured_retention(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = make_config(tmp_path, fake_llm.base_url, store={"media_retention_days": 2})
    media = config.home_path / "media"
    media.mkdir(parents=True)
    old, recent = _file(media / "a.png", 3), _file(media / "b.png", 1)
    async with running_gateway(config) as (gw, _):
        await Housekeeper(gw.live, gw.agents, gw.store).sweep()
    assert not old.exists() and recent.exists()
