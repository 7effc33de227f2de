"""The doubled-part count under crash chaos: `hermes gateway run` on the fake Telegram, killed
again and again right after Telegram took a reply (before its OK reached the gateway, or just
after), restarted each time. Before the intent record and the edit probe, such kills doubled
parts; now every part must be in the chat once. Figures go to the chaos record."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.crash import SEND_MODES, run_crash_chaos
from tests.chaos.kit import env_number, record
from tests.fakes.openai import FakeOpenAI

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_kills_in_the_send_window_double_no_part(tmp_path: Path, llm: FakeOpenAI) -> None:
    rounds = int(env_number("HERMES_CHAOS_ROUNDS", 24))
    seed = int(env_number("HERMES_CHAOS_SEED", 5))
    report = run_crash_chaos(
        tmp_path, llm, rounds=rounds, chats=4, seed=seed, settle=(0.3, 1.0), modes=SEND_MODES
    )
    f = report.figures
    figures = {
        "kills": f["kills"],
        "aimed_at_a_taken_reply": f["send_kills"]["aimed"],
        "doubled_answers": len(report.doubled),
        "never_answered": f["never_answered"],
        "sent": f["sent"],
    }
    record("exactly_once", figures)
    print("exactly_once", figures)
    assert f["never_answered"] == 0, report.lost[:20]
    assert figures["aimed_at_a_taken_reply"] >= rounds // 3, figures
    assert report.doubled == [], figures
