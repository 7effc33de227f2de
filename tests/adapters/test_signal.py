"""The Signal adapter's parts on their own: envelopes normalized (mentions, groups, quotes,
junk), the event stream's wire format, JSON-RPC errors as the gateway's kinds, the sent-check's
evidence and its file, attachments under the size cap, and the doctor's probe against the fake
signal-cli daemon."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.signal.inbound import GROUP, Me, evidence, normalize, quoted
from adapters.signal.ledger import Ledger, Seen, Sent, digest
from adapters.signal.media import fetch
from adapters.signal.probe import probe
from adapters.signal.replies import send_message
from adapters.signal.rpc import Daemon, RpcError, answer
from adapters.signal.settings import SignalConfig
from adapters.signal.stream import _parse, envelope
from hermes_gateway.platform_spec import ProbeFailed
from hermes_gateway.platforms import (
    Attachment,
    PermanentAdapterError,
    RateLimitedError,
    TransientAdapterError,
)
from tests.fakes.signal import FakeSignalCli, user_uuid

ME = Me("+15550000001", "bot-uuid")
ALICE = "+15550000002"


def env(**data: Any) -> dict[str, Any]:
    base = {"timestamp": 1700000000001, "message": "hi"}
    return {
        "source": ALICE,
        "sourceNumber": ALICE,
        "sourceUuid": user_uuid(ALICE),
        "sourceName": "Alice",
        "timestamp": 1700000000001,
        "dataMessage": {**base, **data},
    }


def test_a_dm_is_addressed_and_keyed_by_sender_and_timestamp() -> None:
    inbound = normalize(env(), ME)
    assert inbound is not None and not inbound.from_self
    event = inbound.event
    assert (event.chat_type, event.chat_id, event.user_id) == ("dm", ALICE, ALICE)
    assert event.message_id == f"{ALICE}:1700000000001" and event.mentioned
    assert quoted(event.message_id) == (ALICE, 1700000000001)
    assert event.user_name == "Alice"


def test_a_group_message_is_addressed_by_a_mention_or_a_reply_to_the_bot() -> None:
    group = {"groupInfo": {"groupId": "G1=="}}
    plain = normalize(env(**group), ME)
    assert plain is not None and not plain.event.mentioned
    assert (plain.event.chat_type, plain.event.chat_id) == ("group", GROUP + "G1==")
    mention = {"uuid": "bot-uuid", "start": 0, "length": 1, "name": "bot"}
    other = {"number": "+1999", "start": 6, "length": 1, "name": "Bob"}
    text = "\ufffc ask \ufffc please"
    by_uuid = normalize(env(message=text, mentions=[mention, other], **group), ME)
    assert by_uuid is not None and by_uuid.event.mentioned
    assert by_uuid.event.text == "ask @Bob please"
    reply = normalize(env(quote={"id": 5, "authorNumber": ME.number}, **group), ME)
    assert reply is not None and reply.event.mentioned


def test_what_is_no_message_is_ignored() -> None:
    junk: list[Any] = [
        None,
        5,
        [],
        {},
        {"dataMessage": {"message": "x"}},  # no sender
        env(message=""),  # nothing to answer
        env(reaction={"emoji": "👍"}),
        {**env(), "timestamp": "soon"},
        {**env(), "dataMessage": "text"},
        env(mentions=[{"start": "a"}, 3]),  # odd mentions: the text is kept as it is
        env(attachments=[{"id": 3}, "x"]),
    ]
    results = [normalize(j, ME) for j in junk]
    assert results[:-2] == [None] * (len(junk) - 2)
    assert results[-2] is not None and results[-1] is not None
    assert normalize({**env(), "sourceNumber": ME.number, "source": ME.number}, ME).from_self  # type: ignore[union-attr]


def test_attachments_are_named_to_the_model_not_fetched() -> None:
    doc = {"id": "a1", "contentType": "application/pdf", "filename": "r.pdf", "size": 1234}
    inbound = normalize(env(message="look", attachments=[doc]), ME)
    assert inbound is not None
    [att] = inbound.event.attachments
    assert (att.file_id, att.name, att.size, att.kind, att.url) == (
        "a1",
        "r.pdf",
        1234,
        "document",
        "",
    )
    assert inbound.event.text == "look\n[attached file: r.pdf (application/pdf, 1234 bytes)]"


def test_receipts_and_sent_transcripts_are_evidence() -> None:
    receipt = {"source": ALICE, "sourceNumber": ALICE, "receiptMessage": {"timestamps": [7, 8]}}
    assert evidence(receipt) == [Seen(ALICE, 7), Seen(ALICE, 8)]
    sent = {"sentMessage": {"destinationNumber": ALICE, "timestamp": 9, "message": "yo"}}
    assert evidence({"source": ME.number, "syncMessage": sent}) == [Seen(ALICE, 9, digest("yo"))]
    assert evidence({"receiptMessage": {"timestamps": ["x"]}, "source": ALICE}) == []


async def test_evidence_is_an_unrecorded_send_after_the_intent_or_the_parts_transcript(
    tmp_path: Path,
) -> None:
    ledger = Ledger(tmp_path / "l.json")
    people = frozenset({ALICE})
    ledger.note_sent(Sent(ALICE, 100, "k1"))  # part 1, recorded
    ledger.note_seen(Seen(ALICE, 100))  # its receipt: no evidence for another part
    ledger.note_seen(Seen(ALICE, 50))  # before the intent
    ledger.note_seen(Seen("+1999", 120))  # someone else's
    assert ledger.evidence(people, 90, "part 2") is None
    ledger.note_seen(Seen(ALICE, 130, digest("other text")))  # the phone sent something else
    ledger.note_seen(Seen(ALICE, 130))
    assert ledger.evidence(people, 90, "part 2") is None
    ledger.note_seen(Seen(ALICE, 140))  # an unrecorded send, acknowledged
    assert ledger.evidence(people, 90, "part 2") == Seen(ALICE, 140)
    assert ledger.evidence(people, 90, "other text") == Seen(ALICE, 130, digest("other text"))
    ledger.advance("3-9")
    await ledger.save()
    again = Ledger(tmp_path / "l.json")
    await again.load()
    assert again.cursor == "3-9" and again.by_key("k1") == Sent(ALICE, 100, "k1")
    assert list(again.seen) == list(ledger.seen)


async def test_a_torn_ledger_file_starts_afresh(tmp_path: Path) -> None:
    for torn in ('{"cursor": "1-2", "sent": [[', '{"cursor": "1-2", "sent": [["+1", "x", ""]]}'):
        (tmp_path / "l.json").write_text(torn)
        ledger = Ledger(tmp_path / "l.json")
        await ledger.load()
        assert ledger.cursor == "" and not ledger.sent


async def test_the_event_stream_wire_format() -> None:
    reader = asyncio.StreamReader()
    lines = ': keep-alive\n\nid: 1-1\nevent: receive\ndata: {"a":\ndata: 1}\n\nid: 1-2\ndata: x\n\n'
    reader.feed_data(lines.encode())
    reader.feed_eof()
    got = [(e.id, e.kind, e.data) async for e in _parse(reader)]  # type: ignore[arg-type]
    assert got == [("1-1", "receive", '{"a":\n1}'), ("1-2", "message", "x")]
    assert envelope('{"envelope": {"x": 1}}') == {"x": 1}
    note = (
        '{"jsonrpc":"2.0","method":"receive",'
        '"params":{"subscription":0,"result":{"envelope":{"y":2}}}}'
    )
    assert envelope(note) == {"y": 2}
    assert envelope("nope") is None and envelope("[1]") is None


def test_json_rpc_errors_are_the_gateways_kinds() -> None:
    assert answer("send", b'{"jsonrpc":"2.0","result":{"timestamp":5},"id":1}') == {"timestamp": 5}
    with pytest.raises(RateLimitedError):
        answer("send", b'{"error":{"code":-5,"message":"rate limited"}}')
    with pytest.raises(TransientAdapterError):
        answer("send", b'{"error":{"code":-3,"message":"network"}}')
    with pytest.raises(TransientAdapterError):
        answer("send", b"<html>")
    with pytest.raises(RpcError) as refused:
        answer("send", b'{"error":{"code":-32601,"message":"Method not implemented"}}')
    assert isinstance(refused.value, PermanentAdapterError) and refused.value.code == -32601


@pytest.fixture
def daemon() -> Iterator[FakeSignalCli]:
    fake = FakeSignalCli().start()
    try:
        yield fake
    finally:
        fake.stop()


def test_the_probe_checks_the_daemon_and_the_account(daemon: FakeSignalCli) -> None:
    section = SignalConfig(enabled=True, account=daemon.account, daemon_url=daemon.url)
    with httpx.Client(timeout=5) as http:
        assert probe(section, http) == f"token valid: {daemon.account} on signal-cli 0.13.99-fake"
        daemon.registered = False
        with pytest.raises(ProbeFailed, match="not registered or linked"):
            probe(section, http)
        daemon.stop()
        with pytest.raises(httpx.HTTPError):
            probe(section, http)


async def test_attachments_are_fetched_under_the_cap(daemon: FakeSignalCli, tmp_path: Path) -> None:
    client = Daemon(daemon.url, daemon.account, 5)
    daemon.add_attachment("att/1", b"x" * 100, "text/plain", "../notes.txt")
    try:
        path = await fetch(
            client, Attachment("document", "att/1", "../notes.txt", size=100), tmp_path, 100
        )
        assert path.parent == tmp_path and path.read_bytes() == b"x" * 100
        with pytest.raises(PermanentAdapterError, match="cap"):  # as announced: no call
            await fetch(client, Attachment("document", "big", "b", size=101), tmp_path, 100)
        daemon.add_attachment("lied", b"y" * 500, "text/plain", "l.txt")
        with pytest.raises(PermanentAdapterError, match="cap"):  # as it arrived
            await fetch(client, Attachment("document", "lied", "l.txt", size=10), tmp_path, 100)
        with pytest.raises(RpcError):
            await fetch(client, Attachment("document", "gone", "g.txt", size=10), tmp_path, 100)
    finally:
        await client.close()
    assert daemon.calls.count("getAttachment") == 3


async def test_a_send_the_daemon_never_got_is_repeated_once_it_is_back(
    daemon: FakeSignalCli, tmp_path: Path
) -> None:
    client = Daemon(daemon.url, daemon.account, 5)
    ledger = Ledger(tmp_path / "l.json")
    daemon.stop()
    sending = asyncio.ensure_future(send_message(client, ledger, ALICE, {"message": "hi"}, "k"))
    await asyncio.sleep(0.3)
    assert not sending.done()  # refused: waiting to try again
    await asyncio.to_thread(daemon.restart)
    try:
        ts = await asyncio.wait_for(sending, 10)
    finally:
        await client.close()
    assert [m["timestamp"] for m in daemon.sent] == [ts]
    assert ledger.by_key("k") == Sent(ALICE, ts, "k")
