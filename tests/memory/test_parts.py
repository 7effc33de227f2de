"""The archive's parts on their own: the vector matrix and its cache, rank fusion, the token
budget, users' memory file names, the tools without a host, and a session's owner."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agent_core.completion import ModelError
from hermes_gateway.cli.main import main
from hermes_gateway.events import MessageEvent
from hermes_gateway.memory.embeddings import Embedder, EmbeddingSettings, pack
from hermes_gateway.memory.host import MemoryHost
from hermes_gateway.memory.ranking import RECENCY_WEIGHT, fuse, within_budget
from hermes_gateway.memory.scope import legacy_notice
from hermes_gateway.memory.vectors import VectorCache, best, grown
from tests.fakes.embeddings import embed
from tests.fakes.openai import FakeOpenAI
from tools import ToolContext
from tools.catalog import ToolSettings, build_registry
from tools.memory import user_file

from ..tools.conftest import call


def test_best_ranks_by_cosine_and_skips_other_dimensions() -> None:
    rows = [(1, pack(embed("backup snapshot"))), (2, pack(embed("kitten"))), (3, pack([1.0, 0.0]))]
    vectors = grown(None, rows[:1], len(rows[0][1]) // 4, 1)
    vectors = grown(vectors, rows[1:], len(rows[0][1]) // 4, 3)  # appended: 3 has 2 dimensions
    assert vectors.last_id == 3 and list(vectors.ids) == [1, 2]
    assert best(vectors.ids, vectors.array, pack(embed("feline pet")), 5) == [2, 1]
    assert best(vectors.ids, vectors.array, pack(embed("nightly restore")), 1) == [1]


def test_the_cache_is_bounded_and_a_forgotten_bank_is_not_put_back() -> None:
    rows = [(i, pack([float(i), 1.0])) for i in range(1, 5)]
    small = grown(None, rows, 2, 4)
    cache = VectorCache(max_bytes=small.nbytes * 2)
    cached, gen = cache.get(("a", "m"))
    assert cached is None
    cache.forget("a")  # e.g. a backfill while that search ran
    cache.put(("a", "m"), small, gen)
    assert cache.get(("a", "m"))[0] is None  # stale: dropped
    for bank in ("a", "b", "c"):
        cache.put((bank, "m"), small, cache.get((bank, "m"))[1])
    assert cache.get(("a", "m"))[0] is None and cache.get(("c", "m"))[0] is small  # LRU


def test_fusion_lets_recency_order_but_not_outvote_relevance() -> None:
    # 1 is the best match by meaning; 2 is newer and second by meaning
    assert fuse([[], [1, 2], [2, 1]], (1.0, 1.0, RECENCY_WEIGHT)) == [1, 2]
    assert fuse([[3], [1, 3], [1, 3]]) == [3, 1]  # found two ways beats found once first
    assert within_budget(["x" * 400, "y" * 400, "z" * 400], 250) == 2
    assert within_budget(["x" * 4000], 10) == 1  # always at least one


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("telegram/123", "telegram/123.md"),
        ("slack/U01AB", "slack/U01AB.md"),
        ("api/../../etc", "api/_.._etc~"),
        ("api/.hidden", "api/hidden~"),
    ],
)
def test_user_files_stay_under_the_directory(tmp_path: Path, user: str, expected: str) -> None:
    path = user_file(tmp_path, user)
    assert str(path.relative_to(tmp_path)).startswith(expected)
    assert path.parent.parent == tmp_path


def test_the_tools_say_when_the_archive_is_not_there(tmp_path: Path) -> None:
    names = ["hindsight_retain", "hindsight_recall", "hindsight_reflect", "memory"]
    reg = build_registry(names, ToolSettings(home=tmp_path, memory_scope="user"))
    ctx = ToolContext(workspace=tmp_path, session_key="telegram:dm:1")
    assert call(reg, ctx, "hindsight_recall", query="x") == (
        "Error: the long-term archive is not available here",
        False,
    )
    content, ok = call(reg, ctx, "memory", action="view")
    assert not ok and "memory is kept per user" in content


class FakeRunner:
    def __init__(self) -> None:
        self.events: dict[str, MessageEvent] = {}

    def current_event(self, key: str) -> MessageEvent | None:
        return self.events.get(key)


def test_a_sessions_owner_outlives_its_run() -> None:
    """After /stop the session gets a fresh agent while no run is live: it keeps its owner's
    memory; a thread has no owner."""
    runner = FakeRunner()
    host = MemoryHost(runner, None, None, scope="user", timeout_s=1)  # type: ignore[arg-type]
    dm = MessageEvent.create(
        platform="telegram", chat_type="dm", chat_id="9", user_id="1", message_id="1", text="x"
    )
    thread = MessageEvent.create(
        platform="telegram",
        chat_type="thread",
        chat_id="-100",
        thread_id="7",
        user_id="1",
        message_id="2",
        text="x",
    )
    runner.events = {dm.session_key: dm, thread.session_key: thread}
    assert host.owner(dm.session_key) == "telegram/1"
    assert host.owner(thread.session_key) is None
    runner.events = {}
    assert host.owner(dm.session_key) == "telegram/1"
    assert host.owner("telegram:dm:unknown") is None


def test_hermes_memory_claim_hands_the_old_file_to_its_owner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    (home / "memory" / "telegram").mkdir(parents=True)
    (home / "MEMORY.md").write_text("Owner runs Debian.\n§\nPrefers metric.\n")
    (home / "memory" / "telegram" / "42.md").write_text("Prefers metric.\n")
    config = tmp_path / "config.yaml"
    config.write_text(f"home: {home}\n")
    assert legacy_notice(home, "user") is not None
    assert main(["memory", "claim", "telegram", "42", "--config", str(config)]) == 0
    assert "1 entries of" in capsys.readouterr().out
    assert (home / "memory" / "telegram" / "42.md").read_text() == (
        "Prefers metric.\n§\nOwner runs Debian.\n"
    )
    assert (home / "MEMORY.md.claimed").exists() and not (home / "MEMORY.md").exists()
    assert legacy_notice(home, "user") is None  # not offered again
    assert main(["memory", "claim", "telegram", "42", "--config", str(config)]) == 1
    assert "nothing to claim" in capsys.readouterr().out


def test_a_gateway_without_the_archive_never_imports_numpy(tmp_path: Path) -> None:
    """numpy is the archive's alone (~13 MB of idle RSS): a gateway whose config does not turn
    the archive on must not load it, at import or while it builds its parts."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from hermes_gateway.config import load_config\n"
        "from hermes_gateway.server import Gateway\n"
        f"Gateway(load_config(None, {{'HERMES_HOME': {str(tmp_path)!r}}}))\n"
        "print('numpy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("path", "key", "named"),
    [
        ("/nowhere", "sk-fake", ["memory.embeddings.model", "memory.embeddings.base_url"]),
        ("", "sk-wrong", ["memory.embeddings.api_key"]),
    ],
)
def test_an_embeddings_failure_names_the_embeddings_keys(
    fake_llm: FakeOpenAI, path: str, key: str, named: list[str]
) -> None:
    settings = EmbeddingSettings(fake_llm.base_url + path, key, "text-embedding-3-small")
    embedder = Embedder(dataclasses.replace(settings, max_retries=0))
    with pytest.raises(ModelError) as failed:
        embedder.embed(["kitten"])
    embedder.close()
    assert all(name in str(failed.value) for name in named), failed.value
    assert "model.name" not in str(failed.value)  # the chat model's key is not the one to fix
