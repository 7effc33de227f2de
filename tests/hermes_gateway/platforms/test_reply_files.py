"""A reply's files in the reply skeleton: after the text, one part each with its own intent, read
when the part is sent (a later change is what goes out), a file in doubt asked after and not
uploaded twice, and a file that cannot go any more replaced by a line saying so."""

from __future__ import annotations

from pathlib import Path

from hermes_gateway.events import OutboundFile, OutboundMessage
from hermes_gateway.platforms.preview import PreviewBook
from hermes_gateway.platforms.reply import Replier, Upload


class FileWire:
    """Telegram-shaped primitives that record every call; ``delivered``: what a lookup finds."""

    def __init__(self, delivered: frozenset[str] = frozenset()) -> None:
        self.calls: list[tuple[str, str, bytes]] = []
        self.delivered = delivered
        self.newest = "m1"

    def after(self) -> str:
        return self.newest

    async def post(self, index: int, part: str, key: str | None) -> None:
        self.calls.append(("post", part, b""))
        self.newest = f"p{index}"

    async def edit(self, ref: int, part: str) -> None:
        self.calls.append(("edit", part, b""))

    async def sent(self, part: str, key: str | None, after: str) -> bool:
        self.calls.append(("sent", part, b""))
        return part in self.delivered

    async def upload(self, index: int, upload: Upload, key: str | None) -> None:
        self.calls.append(("upload", upload.file.name, upload.data))
        self.newest = f"u{index}"

    async def uploaded(self, upload: Upload, key: str | None, after: str) -> bool:
        self.calls.append(("uploaded", upload.file.name, b""))
        return upload.file.name in self.delivered


def message(
    files: tuple[OutboundFile, ...], **kw: object
) -> tuple[OutboundMessage, list[tuple[int, str]]]:
    intents: list[tuple[int, str]] = []

    async def on_sending(index: int, after: str) -> None:
        intents.append((index, after))

    out = OutboundMessage(
        platform="telegram",  # a platform that takes files (its spec's upload limit)
        chat_id="c1",
        text="one\n\ntwo",
        session_key="telegram:dm:c1",
        answers=("m1",),
        run_id="r1",
        on_sending=on_sending,
        files=files,
        **kw,  # type: ignore[arg-type]
    )
    return out, intents


def replier() -> Replier[str, int]:
    return Replier(PreviewBook[str, int]("telegram"))


def a_file(tmp_path: Path, name: str, data: bytes) -> OutboundFile:
    path = tmp_path / name
    path.write_bytes(data)
    return OutboundFile(str(path.resolve()), name, "cap")


async def test_files_follow_the_text_in_order_each_a_part_read_when_it_is_sent(
    tmp_path: Path,
) -> None:
    first, second = a_file(tmp_path, "a.csv", b"old"), a_file(tmp_path, "b.png", b"png")
    out, intents = message((first, second))
    Path(first.path).write_bytes(b"changed after send_file")  # what goes out is the file now
    wire = FileWire()
    await replier().send(out, ["one", "two"], wire)
    assert wire.calls == [
        ("post", "one", b""),
        ("post", "two", b""),
        ("upload", "a.csv", b"changed after send_file"),
        ("upload", "b.png", b"png"),
    ]
    assert intents == [(0, "m1"), (1, "p0"), (2, "p1"), (3, "u2")]


async def test_a_file_in_doubt_that_went_out_is_not_uploaded_again(tmp_path: Path) -> None:
    first, second = a_file(tmp_path, "a.csv", b"a"), a_file(tmp_path, "b.csv", b"b")
    out, _ = message((first, second), skip_parts=2, doubt="p1")
    wire = FileWire(delivered=frozenset({"a.csv"}))
    await replier().send(out, ["one", "two"], wire)
    assert wire.calls == [("uploaded", "a.csv", b""), ("upload", "b.csv", b"b")]


async def test_a_file_in_doubt_that_did_not_go_out_is_uploaded(tmp_path: Path) -> None:
    out, _ = message((a_file(tmp_path, "a.csv", b"a"),), skip_parts=2, doubt="p1")
    wire = FileWire()
    await replier().send(out, ["one", "two"], wire)
    assert wire.calls == [("uploaded", "a.csv", b""), ("upload", "a.csv", b"a")]


async def test_a_file_grown_over_the_limit_or_gone_is_a_line_for_the_user(tmp_path: Path) -> None:
    big, gone = a_file(tmp_path, "big.bin", b""), a_file(tmp_path, "gone.txt", b"x")
    with open(big.path, "r+b") as fh:  # sparse: over Telegram's 50 MB on paper
        fh.truncate(51 * 1024 * 1024)
    Path(gone.path).unlink()
    out, _ = message((big, gone))
    wire = FileWire()
    await replier().send(out, ["one", "two"], wire)
    assert [c[0] for c in wire.calls] == ["post"] * 4
    assert "big.bin" in wire.calls[2][1] and "51.0 MB, over the 50.0 MB limit" in wire.calls[2][1]
    assert "gone.txt" in wire.calls[3][1] and "no longer exists" in wire.calls[3][1]


async def test_a_file_swapped_for_a_link_is_not_followed(tmp_path: Path) -> None:
    swapped = a_file(tmp_path, "r.csv", b"mine")
    (tmp_path / "elsewhere").write_bytes(b"not the workspace's")
    Path(swapped.path).unlink()
    Path(swapped.path).symlink_to(tmp_path / "elsewhere")
    out, _ = message((swapped,))
    wire = FileWire()
    await replier().send(out, ["one", "two"], wire)
    assert [c[0] for c in wire.calls] == ["post", "post", "post"]
    assert "link" in wire.calls[2][1]
