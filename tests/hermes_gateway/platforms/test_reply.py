"""The reply skeleton on a fake platform's primitives: the first part takes over the preview
(posted anew when the preview is gone), a part in doubt is asked after and sent again only when
it did not go out, the other parts are posted, and each part's intent records the wire's
reference."""

from __future__ import annotations

import pytest

from hermes_gateway.errors import PermanentAdapterError, TransientAdapterError
from hermes_gateway.events import OutboundMessage
from hermes_gateway.platforms.parts import part_key
from hermes_gateway.platforms.preview import PreviewBook
from hermes_gateway.platforms.reply import PreviewRef, Replier

PARTS = ["one", "two", "three"]


class Wire:
    """A platform's reply primitives that record every call. ``delivered``: the parts a
    lookup finds (they went out before a crash); ``edit_fails``: what editing the preview
    raises."""

    def __init__(
        self, delivered: frozenset[str] = frozenset(), edit_fails: Exception | None = None
    ) -> None:
        self.calls: list[tuple[str, str, str | None]] = []
        self.delivered = set(delivered)
        self.edit_fails = edit_fails
        self.newest = "m1"

    def after(self) -> str:
        return self.newest

    async def post(self, index: int, part: str, key: str | None) -> None:
        self.calls.append(("post", part, key))
        self.newest = f"p{index}"

    async def edit(self, ref: int, part: str) -> None:
        if self.edit_fails is not None:
            raise self.edit_fails
        self.calls.append(("edit", part, str(ref)))

    async def sent(self, part: str, key: str | None, after: str) -> bool:
        self.calls.append(("sent", part, after))
        return part in self.delivered


def reply(**kw: object) -> tuple[OutboundMessage, list[tuple[int, str]]]:
    intents: list[tuple[int, str]] = []

    async def on_sending(index: int, after: str) -> None:
        intents.append((index, after))

    out = OutboundMessage(
        platform="fake",
        chat_id="c1",
        text="\n\n".join(PARTS),
        session_key="fake:dm:c1",
        answers=("m1",),
        run_id="r1",
        on_sending=on_sending,
        **kw,  # type: ignore[arg-type]
    )
    return out, intents


def replier() -> Replier[str, int]:
    return Replier(PreviewBook[str, int]("fake"))


async def test_the_first_part_takes_over_the_preview_and_the_rest_are_posted() -> None:
    out, intents = reply()
    wire = Wire()
    await replier().send(out, PARTS, wire, PreviewRef("m1", 7))
    assert wire.calls == [
        ("edit", "one", "7"),
        ("post", "two", part_key(out, 1, "two")),
        ("post", "three", part_key(out, 2, "three")),
    ]
    assert intents == [(0, "m1"), (1, "m1"), (2, "p1")]  # the newest reference before each


async def test_a_preview_that_is_gone_is_replaced_by_a_new_message() -> None:
    out, _ = reply()
    wire = Wire(edit_fails=PermanentAdapterError("message to edit not found"))
    await replier().send(out, PARTS, wire, PreviewRef("m1", 7))
    assert [call[:2] for call in wire.calls] == [("post", p) for p in PARTS]


async def test_a_preview_that_cannot_be_edited_now_is_kept_for_the_redelivery() -> None:
    out, _ = reply()
    book = PreviewBook[str, int]("fake")
    wire = Wire(edit_fails=TransientAdapterError("timed out"))
    with pytest.raises(TransientAdapterError):
        await Replier(book).send(out, PARTS, wire, PreviewRef("m1", 7))
    assert wire.calls == [] and await book.take("m1") == 7


async def test_a_part_in_doubt_that_went_out_is_not_sent_again() -> None:
    out, _ = reply(skip_parts=1, doubt="p0")
    wire = Wire(delivered=frozenset({"two"}))
    await replier().send(out, PARTS, wire)
    assert wire.calls == [("sent", "two", "p0"), ("post", "three", part_key(out, 2, "three"))]


async def test_a_part_in_doubt_that_did_not_go_out_is_sent() -> None:
    out, _ = reply(skip_parts=1, doubt="p0")
    wire = Wire()
    await replier().send(out, PARTS, wire)
    assert wire.calls == [
        ("sent", "two", "p0"),
        ("post", "two", part_key(out, 1, "two")),
        ("post", "three", part_key(out, 2, "three")),
    ]


async def test_only_the_part_in_doubt_is_asked_after_and_without_doubt_none_is() -> None:
    out, _ = reply(doubt="m1")
    wire = Wire(delivered=frozenset({"one", "two"}))
    await replier().send(out, PARTS, wire, PreviewRef("m1", 7))
    # the preview took part 1 (no lookup for it); part 2 is not in doubt, so it is posted
    assert [call[0] for call in wire.calls] == ["edit", "post", "post"]
    plain, _ = reply()
    wire = Wire(delivered=frozenset(PARTS))
    await replier().send(plain, PARTS, wire)
    assert [call[0] for call in wire.calls] == ["post", "post", "post"]
