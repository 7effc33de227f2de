"""The bench runs end to end in a tiny configuration (figures are never checked:
CI must not fail on a timing), and its pure parts compute what they claim."""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from bench import lag, micro, report
from bench.__main__ import main
from bench.driver import Driver, percentile
from bench.procs import ROOT, Child
from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
NUMBER = (int, float)
SIDE_FIGURES: dict[str, type | tuple[type, ...]] = {
    "cold_start_s": NUMBER,
    "first_poll_s": NUMBER,
    "rss_idle_mb": NUMBER,
    "rss_warm_mb": NUMBER,
    "latency_p50_ms": NUMBER,
    "latency_p99_ms": NUMBER,
    "cpu_per_msg_ms": NUMBER,
    "throughput_1": NUMBER,
    "throughput_10": NUMBER,
    "throughput_100": NUMBER,
    "slow_wall_s": NUMBER,
    "slow_peak_parallel": NUMBER,
    "rss_after_sessions_mb": dict,
    "kb_per_session": NUMBER,
    "history_p50_1_ms": NUMBER,
    "history_p50_deep_ms": NUMBER,
    "lost": int,
}
RATIOS = ("latency_p50", "latency_p99", "throughput_100", "cold_start", "rss_idle", "cpu_per_msg")


@pytest.mark.slow  # .ci/run runs the quick bench and checks it lost nothing
def test_tiny_bench_writes_every_figure_and_loses_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    assert main(["--tiny", "--json", str(out), "--workdir", str(tmp_path / "work")]) == 0
    data = json.loads(out.read_text())
    json.dumps(data, allow_nan=False)  # strict JSON: no NaN or Infinity anywhere
    for side in ("gateway", "floor"):
        for key, kind in SIDE_FIGURES.items():
            assert isinstance(data[side][key], kind), (side, key, data[side].get(key))
    assert set(data["ratios"]) == set(RATIOS)
    assert set(data["info_ratios"]) == {"rss_warm"}
    assert all(isinstance(v, NUMBER) and v > 0 for v in data["ratios"].values()), data["ratios"]
    for key in ("loop_lag_p99_ms", "kb_per_session", "history_slope"):
        assert isinstance(data[key], NUMBER), key
    assert data["loop_lag"]["samples"] > 0
    assert data["lost"] == 0, (data["gateway"]["lost_by_phase"], data["floor"]["lost_by_phase"])
    assert data["gateway"]["history_llm_messages"] > data["floor"]["history_llm_messages"] == 1
    table = capsys.readouterr().out
    assert "| latency p50, 1 session (ms) |" in table and "| lost | 0 | == 0 | yes |" in table


@pytest.mark.slow  # three sides instead of two: about a minute
def test_tiny_bench_measures_a_baseline_checkout_by_the_same_harness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--tiny", "--json", str(out), "--workdir", str(tmp_path / "work")]
    assert main([*argv, "--baseline", str(ROOT)]) == 0
    data = json.loads(out.read_text())
    json.dumps(data, allow_nan=False)
    for key, kind in SIDE_FIGURES.items():
        assert isinstance(data["baseline"][key], kind), (key, data["baseline"].get(key))
    assert set(data["baseline_ratios"]) == set(data["vs_baseline"]) == set(RATIOS)
    assert all(isinstance(v, NUMBER) and v > 0 for v in data["vs_baseline"].values())
    assert data["baseline_commit"] == data["machine"]["commit"]  # the same checkout here
    assert data["lost"] == 0, data["baseline"]["lost_by_phase"]
    assert (tmp_path / "work" / "gateway-baseline-0.yaml").is_file()  # its own home and config
    header = next(line for line in capsys.readouterr().out.splitlines() if "| figure |" in line)
    assert header.endswith("| baseline | baseline ratio | ratio ÷ baseline ratio |")


CROWD_FIGURES = (
    "wall_over_model",
    "loop_lag_p99_ms",
    "healthz_p99_ms",
    "rss_peak_mb",
    "kb_per_run",
    "cpu_per_msg_ms",
    "model_max_in_flight",
)


@pytest.mark.slow  # about 20 s: two crowds per side and the fairness case
def test_tiny_crowd_bench_writes_every_figure_and_loses_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "crowd.json"
    argv = ["--only", "crowd", "--tiny", "--json", str(out), "--workdir", str(tmp_path / "w")]
    assert main(argv) == 0
    data = json.loads(out.read_text())
    json.dumps(data, allow_nan=False)
    for load in ("10x0.05", "30x0.2"):
        for side in ("gateway", "floor"):
            [run] = data[load][side]
            assert run["lost"] == 0 and run["answered"] == int(load.split("x")[0]), run
            for key in CROWD_FIGURES if side == "gateway" else CROWD_FIGURES[:1]:
                assert isinstance(run[key], NUMBER), (load, side, key)
    fair = data["fairness"]
    assert isinstance(fair["p50_ratio"], NUMBER) and fair["flood_answered"][0] > 0
    assert all(run["lost"] == 0 for run in fair["alone"] + fair["beside_flood"])
    assert "| 30x0.2 s | gateway |" in capsys.readouterr().out


@pytest.mark.slow  # about 10 s: a crowd and a session per side, one run each
def test_tiny_traces_bench_compares_traces_on_with_off_and_exports_every_span(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "traces.json"
    argv = ["--only", "traces", "--tiny", "--json", str(out), "--workdir", str(tmp_path / "w")]
    assert main(argv) == 0
    data = json.loads(out.read_text())
    json.dumps(data, allow_nan=False)
    for phase in ("crowd", "sequential"):
        for side in ("off", "on"):
            [run] = data[phase][side]
            assert run["lost"] == 0 and run["answered"] > 0, (phase, side, run)
        ratios = data["ratios"][phase]
        for key in ("cpu_per_msg_ms", "latency_p50_ms", "latency_p99_ms"):
            assert isinstance(ratios[key], NUMBER), (phase, key)
    assert data["spans"].get("exported", 0) > 0 and not data["spans"].get("dropped")
    assert not data["spans"].get("failed")
    assert "crowd: on ÷ off: cpu_per_msg_ms" in capsys.readouterr().out


def test_a_baseline_gateway_runs_its_own_checkouts_code(tmp_path: Path) -> None:
    """Its `hermes_gateway` is the other checkout's, not the one installed in this venv."""
    other = tmp_path / "other"
    (other / "hermes_gateway").mkdir(parents=True)
    (other / "hermes_gateway" / "__init__.py").write_text("")
    (other / "hermes_gateway" / "__main__.py").write_text('print("READY", __file__)\n')
    child = Child("probe", [sys.executable, "-m", "hermes_gateway"], tmp_path, True, other)
    try:
        line = child.read_line(20)
    finally:
        child.stop()
    assert line.split() == ["READY", str(other / "hermes_gateway" / "__main__.py")]


def test_a_baseline_without_a_gateway_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--tiny", "--baseline", str(tmp_path)])
    assert exc.value.code == 2


def test_vs_baseline_divides_each_ratio_by_the_baselines() -> None:
    mine = {"latency_p50": 1.2, "throughput_100": 0.9, "rss_idle": None, "cold_start": 1.0}
    theirs = {"latency_p50": 1.0, "throughput_100": 1.2, "rss_idle": 1.5, "cold_start": 0}
    assert report.vs_baseline(mine, theirs) == {
        "latency_p50": 1.2,
        "throughput_100": 0.75,
        "rss_idle": None,
        "cold_start": None,
    }


def test_histogram_quantile_interpolates_inside_the_bucket() -> None:
    buckets = {0.01: 50.0, 0.025: 90.0, 0.05: 100.0, math.inf: 100.0}
    assert lag.quantile(0.5, buckets) == pytest.approx(0.01)
    assert lag.quantile(0.99, buckets) == pytest.approx(0.025 + 0.025 * 0.9)
    summary = lag.summary(buckets)
    assert summary["p99_bucket_ms"] == [25.0, 50.0] and summary["decides_20ms_target"]
    undecided = lag.summary({0.01: 0.0, 0.025: 10.0, math.inf: 10.0})
    assert not undecided["decides_20ms_target"] and undecided["suggested_buckets_s"]
    assert lag.summary({0.01: 0.0, math.inf: 3.0})["over_top_bucket"] == 3
    assert lag.quantile(0.99, {}) is None


def test_metrics_page_parses_and_diffs() -> None:
    page = (
        "# HELP hermes_loop_lag_seconds Event-loop lag samples\n"
        'hermes_loop_lag_seconds_bucket{le="0.005"} 3.0\n'
        'hermes_loop_lag_seconds_bucket{le="+Inf"} 4.0\n'
        "hermes_loop_lag_seconds_count 4.0\n"
    )
    after = lag.parse(page)
    assert after == {0.005: 3.0, math.inf: 4.0}
    assert lag.diff(after, {0.005: 1.0, math.inf: 1.0}) == {0.005: 2.0, math.inf: 3.0}


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 201)]
    assert (percentile(values, 0.5), percentile(values, 0.99)) == (100.0, 198.0)
    assert percentile([], 0.5) == 0.0


async def test_fake_openai_control_api_counts_and_resets(fake_llm: FakeOpenAI) -> None:
    root = fake_llm.url
    async with aiohttp.ClientSession() as http:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}] * 3}
        headers = {"Authorization": "Bearer sk-fake"}
        async with http.post(f"{fake_llm.base_url}/chat/completions", json=body, headers=headers):
            pass
        async with http.get(f"{root}/_fake/stats") as resp:
            stats = await resp.json()
        assert (stats["requests"], stats["max_in_flight"], stats["last_messages"]) == (1, 1, 3)
        async with http.post(f"{root}/_fake/reset", json={"delay": 0.01}) as resp:
            stats = await resp.json()
        assert (stats["requests"], stats["max_in_flight"], stats["delay"]) == (0, 0, 0.01)


async def test_a_bot_that_never_answers_costs_one_reply_timeout_not_one_per_message() -> None:
    with FakeTelegram() as fake:  # nobody polls it: every message is lost
        async with Driver(fake.url, reply_timeout=0.2) as driver:
            started = time.monotonic()
            load = await driver.sessions(driver.new_chats(2), 5, time.monotonic() + 30)
    assert (load.lost, load.unsent, load.answered) == (2, 8, 0)
    assert time.monotonic() - started < 5


async def test_replies_are_matched_by_chat_and_text_and_strays_counted() -> None:
    with FakeTelegram() as fake:
        async with Driver(fake.url, reply_timeout=5) as driver, aiohttp.ClientSession() as bot:
            [chat] = driver.new_chats(1)

            async def answer() -> None:  # a bot: a stale reply, then the real one
                await asyncio.sleep(0.2)
                text = fake.pending_updates[-1]["message"]["text"]
                for reply in ("echo: ping 999999", f"echo: {text}"):
                    body = {"chat_id": chat, "text": reply}
                    async with bot.post(f"{fake.api_url}{fake.token}/sendMessage", json=body):
                        pass

            task = asyncio.create_task(answer())
            latency = await driver.ask(chat)
            await task
    assert latency is not None and latency >= 0.2
    assert driver.stray == 1


def test_micro_benchmarks_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert micro.main(["-n", "3"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 2 + 3 + 6  # the header, then store, llm, telegram


@pytest.mark.slow  # real PostgreSQL and Redis, five gateway processes: about a minute
def test_tiny_cluster_scale_bench_writes_its_figures_and_loses_nothing(tmp_path: Path) -> None:
    from bench import cluster_scale

    out = tmp_path / "scale.json"
    figures = cluster_scale.main(["--tiny", "--json", str(out)])
    assert json.loads(out.read_text())["answers_per_s"].keys() == {"1", "2"}
    assert set(figures["max_in_flight"]) == {1, 2} and set(figures["scaling"]) == {2}
    assert figures["max_in_flight"][2] <= 2  # one worker an instance: the pool bounds it
    assert (figures["lost"], figures["concurrent_runs"]) == (0, 0)
    assert isinstance(figures["failover_p50_s"], NUMBER)
