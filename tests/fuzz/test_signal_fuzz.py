"""Fuzzing Signal's intake: signal-cli envelopes (messages with mentions, quotes, groups and
attachments; receipts; sent transcripts) mutated and random JSON, through `normalize`,
`evidence` and the stream's `envelope`: none raises, and what is accepted is well formed."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from adapters.signal.inbound import Me, evidence, normalize
from adapters.signal.ledger import Seen
from adapters.signal.stream import envelope
from tests.fakes.signal import FakeSignalCli
from tests.fuzz.strategies import JSON, mutated
from tests.fuzz.test_normalizers import FUZZ, well_formed

_FAKE = FakeSignalCli()
ME = Me(_FAKE.account, _FAKE.uuid)
ALICE = "+15550000002"
BASES: list[dict[str, Any]] = [
    _FAKE.envelope(ALICE, 11, dataMessage={"timestamp": 11, "message": "hi", "mentions": []}),
    _FAKE.envelope(
        ALICE,
        12,
        dataMessage={
            "timestamp": 12,
            "message": "\ufffc look",
            "mentions": [_FAKE.mention_of_me()],
            "groupInfo": {"groupId": "R3JvdXA="},
            "quote": {"id": 5, "author": ME.number, "authorNumber": ME.number, "text": "x"},
            "attachments": [
                {"id": "a", "contentType": "image/png", "filename": "p.png", "size": 3}
            ],
        },
    ),
    _FAKE.envelope(ALICE, 13, receiptMessage={"isDelivery": True, "timestamps": [7, 8]}),
    _FAKE.envelope(
        ME.number,
        14,
        syncMessage={"sentMessage": {"destinationNumber": ALICE, "timestamp": 14, "message": "m"}},
    ),
    _FAKE.envelope(ALICE, 15, typingMessage={"action": "STARTED", "timestamp": 15}),
    # odd shapes a mutation seldom reaches: the base itself carries them
    _FAKE.envelope(
        ALICE,
        16,
        dataMessage={
            "timestamp": 16,
            "message": "\ufffc",
            "mentions": [{"start": "0"}, {"uuid": ME.uuid, "start": 9, "length": 1}, 4],
            "attachments": [{"id": 1}, {"id": "b", "size": -1}],
        },
    ),
    _FAKE.envelope(ALICE, 17, receiptMessage={"timestamps": ["7", True, -1, 8.5, 9]}),
]


@FUZZ
@given(raw=st.sampled_from(BASES).flatmap(mutated) | JSON)
def test_signal_any_envelope_is_normalized_or_ignored_never_raises(raw: Any) -> None:
    for per_user in (True, False):
        inbound = normalize(raw, ME, per_user=per_user)
        if inbound is not None:
            well_formed(inbound.event, "signal")
    assert all(isinstance(seen, Seen) and isinstance(seen.ts, int) for seen in evidence(raw))
    wrapped = envelope(json.dumps({"envelope": raw, "account": ME.number}))
    assert wrapped == raw or raw is None
