"""How much a bench run does: the full run, `--quick` (CI, < 90 s) and `--tiny`
(the test's smoke run, whose figures mean nothing)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Plan:
    mode: str
    cold_reps: int  # restarts timed for cold start and idle RSS
    sequential: int  # messages in the one-session latency run
    latency_reps: int  # such runs, each in a new session
    history_extra: int  # messages timed once the session holds `sequential` turns
    history_fresh: int  # new sessions whose second message (1 turn of history) is timed
    throughput: dict[int, int] = field(default_factory=dict)  # sessions -> messages each
    throughput_reps: int = 3
    slow_sessions: int = 100  # sessions x 1 message against the 200 ms model
    slow_reps: int = 3
    slow_delay_s: float = 0.2
    memory_sessions: tuple[int, int] = (1_000, 10_000)
    memory_concurrency: int = 100
    rss_settle_s: float = 1.0  # idle RSS: read once it moved < 1 % over this long
    idle_s: float = 3.0  # idle CPU is measured over this long
    ceiling: tuple[int, int] = (100, 10)  # echo bot: sessions x messages (harness ceiling)
    reply_timeout_s: float = 30.0  # a message unanswered this long is lost
    phase_timeout_s: float = 600.0  # no phase sends new messages past this

    @classmethod
    def named(cls, mode: str) -> Plan:
        return PLANS[mode]

    def summary(self) -> str:
        """The counts in one line, for the top of the table."""
        loads = ", ".join(f"{n} x {k}" for n, k in self.throughput.items())
        small, large = self.memory_sessions
        return (
            f"{self.cold_reps} cold start(s) per side; latency {self.latency_reps} x "
            f"{self.sequential} sequential; history +{self.history_extra} at "
            f"{self.sequential} turns vs {self.history_fresh} new sessions; throughput "
            f"sessions x messages {loads}, {self.throughput_reps} run(s) each; "
            f"{self.slow_delay_s * 1000:g} ms model {self.slow_sessions} x 1, "
            f"{self.slow_reps} run(s); memory N1 = {small:,}, N2 = {large:,} sessions; "
            f"reply timeout {self.reply_timeout_s:g} s"
        )

    def describe(self) -> dict[str, Any]:
        data = asdict(self)
        data["throughput"] = {str(k): v for k, v in self.throughput.items()}
        return data


PLANS = {
    "full": Plan(
        mode="full",
        cold_reps=5,
        sequential=200,
        # the 1-session ratios are the noisiest (the floor's own CPU per message moved from
        # 5.5 to 8.1 ms between runs): five interleaved runs per side, ~2 s each
        latency_reps=5,
        history_extra=20,
        history_fresh=20,
        throughput={1: 100, 10: 20, 100: 5},
        throughput_reps=3,
        slow_reps=3,
        memory_sessions=(1_000, 10_000),
    ),
    "quick": Plan(
        mode="quick",
        cold_reps=1,
        sequential=200,
        latency_reps=1,
        history_extra=10,
        history_fresh=10,
        throughput={1: 40, 10: 5, 100: 2},
        throughput_reps=1,
        slow_reps=1,
        memory_sessions=(100, 500),
        idle_s=1.0,
        ceiling=(100, 5),
        reply_timeout_s=15.0,
        phase_timeout_s=40.0,
    ),
    "tiny": Plan(
        mode="tiny",
        cold_reps=1,
        sequential=5,
        latency_reps=1,
        history_extra=2,
        history_fresh=2,
        throughput={1: 3, 10: 1, 100: 1},
        throughput_reps=1,
        slow_sessions=16,
        slow_reps=1,
        slow_delay_s=0.05,
        memory_sessions=(10, 30),
        memory_concurrency=10,
        rss_settle_s=0.2,
        idle_s=0.2,
        ceiling=(10, 2),
        reply_timeout_s=15.0,
        phase_timeout_s=20.0,
    ),
}
