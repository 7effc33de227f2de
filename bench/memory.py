"""``python -m bench.memory [--quick] [--postgres URL] [--dims N] [--no-chat] [--json PATH]``:
the memory archive's figures, printed as Markdown and written as JSON (default
``bench/results/memory.json``).

1. recall latency (p50 / p99 over distinct queries, after one warm-up) with 10,000 and 100,000
   memories in one bank (``--quick``: 2,000 and 10,000), on SQLite and, with ``--postgres``,
   PostgreSQL without pgvector (the brute-force scan) and, where the server has it, with
   pgvector (the rows filled as bytes, then the archive's open converts them and builds the
   HNSW index: timed as ``open``); the embeddings call is a local stub (what is measured is
   the store's keyword search, the vector search and the fetch, not the provider's latency);
2. chat latency with ``memory.auto_retain`` on vs off, same run, in-process gateway on the fake
   model and fake embeddings: the ratio of the medians (target <= 1.1).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import uvloop
from sqlalchemy.ext.asyncio import AsyncConnection

from bench.driver import percentile
from hermes_gateway.memory.archive import _MEM, Archive
from hermes_gateway.memory.embeddings import EmbeddingSettings
from hermes_gateway.memory.service import MemoryService
from hermes_gateway.store.store import Store

ROOT = Path(__file__).resolve().parent.parent
# a vocabulary of 5,000 made-up words of 2-4 syllables (shared prefixes, as in a language),
# used Zipf-like: a few are common, most are rare, as in real notes
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
_PICK = random.Random(3)
VOCABULARY = sorted(
    {"".join(_PICK.choices(_SYLLABLES, k=_PICK.randint(2, 4))) for _ in range(5200)}
)[:5000]
_PICK.shuffle(VOCABULARY)
WEIGHTS = [1.0 / (n + 1) for n in range(len(VOCABULARY))]


class StubEmbedder:
    """Deterministic unit vectors from a text's hash: the same cost to the archive as real ones."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.settings = EmbeddingSettings("", "", "stub")

    @property
    def model(self) -> str:
        return "stub"

    def embed(self, texts: list[str]) -> list[bytes]:
        return [vector(t, self.dims) for t in texts]

    def close(self) -> None:
        pass


def vector(text: str, dims: int) -> bytes:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dims).astype(np.float32)
    return (v / np.linalg.norm(v)).tobytes()


async def fill(store: Store, bank: str, count: int, dims: int) -> None:
    rng = random.Random(7)
    now = time.time()
    for start in range(0, count, 1000):
        rows = []
        for i in range(start, min(count, start + 1000)):
            body = " ".join(rng.choices(VOCABULARY, WEIGHTS, k=12)) + f" item {i}"
            rows.append(
                {
                    "bank": bank,
                    "content": body,
                    "context": "",
                    "tags": "",
                    "session_key": "",
                    "message_id": "",
                    "created_at": now - count + i,
                    "model": "stub",
                    "embedding": vector(body, dims),
                }
            )
        await store._tx(lambda conn, rows=rows: conn.execute(_MEM.insert(), rows))


async def recall_latency(
    url: str, count: int, dims: int, queries: int, pgvector: bool = False
) -> dict[str, Any]:
    store = Store(url)
    await store.open()
    try:
        await fill(store, "bench/1", count, dims)
        archive = Archive(store, pgvector=pgvector)
        started = time.perf_counter()
        await archive.open()  # with pgvector: the column filled, the index built
        opened = time.perf_counter() - started
        if pgvector and not (archive.pg and archive.pg.usable):
            return {"memories": count, "skipped": "the server has no pgvector"}
        service = MemoryService(
            archive,
            None,
            StubEmbedder(dims),  # type: ignore[arg-type]
            extract=False,
            token_budget=1500,
            recall_limit=8,
        )
        started = time.perf_counter()
        await service.recall("bench/1", " ".join(VOCABULARY[:3]), 8)
        cold = time.perf_counter() - started
        times = []
        rng = random.Random(11)
        for _ in range(queries):
            query = " ".join(rng.choices(VOCABULARY, WEIGHTS, k=3))
            started = time.perf_counter()
            found = await service.recall("bench/1", query, 8)
            times.append(time.perf_counter() - started)
            assert found.memories
    finally:
        await store.close()
    return {
        "memories": count,
        "open_s": round(opened, 1),
        "first_ms": round(cold * 1000, 1),
        "p50_ms": round(percentile(times, 0.5) * 1000, 1),
        "p99_ms": round(percentile(times, 0.99) * 1000, 1),
    }


async def chat_latency(auto_retain: bool, messages: int, workdir: Path) -> list[float]:
    from tests.fakes.openai import FakeOpenAI
    from tests.harness import make_config, running_gateway

    with FakeOpenAI(api_key="sk-fake") as llm:
        home = workdir / ("on" if auto_retain else "off")
        home.mkdir(parents=True)
        config = make_config(home, llm.base_url, memory={"auto_retain": auto_retain})
        times = []
        async with running_gateway(config) as (gw, api):
            await api.chat("warm up")
            for i in range(messages):
                started = time.perf_counter()
                await api.chat(f"message {i}: the backup runs at 03:00 on Sundays")
                times.append(time.perf_counter() - started)
            service = gw.memory.service
            if auto_retain and service is not None:
                for _ in range(600):  # the queue's batches, written once the gateway is quiet
                    if not len(service.queue) and service.queue.written > messages:
                        break
                    await asyncio.sleep(0.1)
                retained = await service.archive.count("api/alice")
                assert retained > 0
                print(f"auto_retain: {retained} of {messages + 1} turns retained", file=sys.stderr)
    return times


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = () if args.no_recall else (2000, 10000) if args.quick else (10000, 100000)
    queries = 30 if args.quick else 100
    out: dict[str, Any] = {"dims": args.dims, "recall": {}, "auto_retain": {}}
    with tempfile.TemporaryDirectory() as tmp:
        backends = {"sqlite": lambda n: f"sqlite+aiosqlite:///{tmp}/bench-{n}.db"}
        if args.only_postgres:
            del backends["sqlite"]
        if args.postgres:
            backends["postgresql (no pgvector)"] = lambda n: args.postgres
            backends["postgresql (pgvector)"] = lambda n: args.postgres
        for name, url in backends.items():
            out["recall"][name] = []
            for n in sizes:
                if name != "sqlite":
                    await _drop(args.postgres)  # one bank of exactly n
                found = await recall_latency(url(n), n, args.dims, queries, "(pgvector)" in name)
                out["recall"][name].append(found)
        if args.no_chat:
            return out
        messages = 40 if args.quick else 60  # per round: under auto-retain's backlog of 64
        off: list[float] = []
        on: list[float] = []
        for n in range(2 if args.quick else 4):  # off and on alternate who goes first
            for flag in (False, True) if n % 2 == 0 else (True, False):
                times = await chat_latency(flag, messages, Path(tmp) / str(n))
                (on if flag else off).extend(times)
    p50_off, p50_on = percentile(off, 0.5), percentile(on, 0.5)
    out["auto_retain"] = {
        "messages": len(on),
        "p50_off_ms": round(p50_off * 1000, 2),
        "p50_on_ms": round(p50_on * 1000, 2),
        "ratio_p50": round(p50_on / p50_off, 3),
        "ratio_mean": round(sum(on) / sum(off), 3),
    }
    return out


async def _drop(url: str) -> None:
    """No memories, and no pgvector index (the next open builds it on the rows then there)."""

    async def run(conn: AsyncConnection) -> None:
        await conn.execute(_MEM.delete())
        for (name,) in await conn.exec_driver_sql(
            "SELECT indexname FROM pg_indexes WHERE indexname LIKE 'ix_memories_vec_%'"
        ):
            await conn.exec_driver_sql(f"DROP INDEX {name}")

    store = Store(url)
    await store.open()
    await store._tx(run)
    await store.close()


def markdown(data: dict[str, Any]) -> str:
    lines = [
        f"recall, one bank, {data['dims']}-dimension vectors (embeddings call stubbed)",
        "",
        "| store | memories | open s | first recall ms | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for store, rows in data["recall"].items():
        for r in rows:
            if "skipped" in r:
                lines.append(f"| {store} | {r['memories']:,} | {r['skipped']} | | | |")
                continue
            lines.append(
                f"| {store} | {r['memories']:,} | {r['open_s']} | {r['first_ms']} "
                f"| {r['p50_ms']} | {r['p99_ms']} |"
            )
    a = data["auto_retain"]
    if not a:
        return "\n".join(lines)
    lines += [
        "",
        f"chat latency, auto_retain on / off ({a['messages']} sequential messages): "
        f"p50 {a['p50_on_ms']} / {a['p50_off_ms']} ms, ratio {a['ratio_p50']} "
        f"(mean ratio {a['ratio_mean']})",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2,000 and 10,000 memories")
    parser.add_argument("--postgres", help="a PostgreSQL URL whose memories table may be emptied")
    parser.add_argument("--dims", type=int, default=256, help="vector size (default 256)")
    parser.add_argument("--no-recall", action="store_true", help="the auto-retain ratio only")
    parser.add_argument("--no-chat", action="store_true", help="the recall latency only")
    parser.add_argument("--only-postgres", action="store_true", help="recall: no SQLite")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "memory.json")
    args = parser.parse_args(argv)
    data = uvloop.run(run(args))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=2) + "\n")
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
