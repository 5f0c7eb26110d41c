"""``Blobs.get_range``: an object's bytes from an offset, on a directory and on S3."""

from __future__ import annotations

from backstop_runtime.blobs import Blobs, open_blobs

Where = tuple[str, dict[str, str]]


def store(where: Where) -> Blobs:
    return open_blobs(*where)


def test_a_range_reads_from_the_offset_to_the_end(data_location: Where) -> None:
    blobs = store(data_location)
    blobs.put("in/seg-1.jsonl", b"0123456789")
    assert blobs.get_range("in/seg-1.jsonl", 0) == b"0123456789"
    assert blobs.get_range("in/seg-1.jsonl", 3) == b"3456789"
    assert blobs.get_range("in/seg-1.jsonl", 9) == b"9"


def test_a_range_at_or_past_the_end_is_empty_and_a_missing_key_none(
    data_location: Where,
) -> None:
    blobs = store(data_location)
    blobs.put("in/seg-1.jsonl", b"abc")
    blobs.put("in/empty.jsonl", b"")
    assert blobs.get_range("in/seg-1.jsonl", 3) == b""
    assert blobs.get_range("in/seg-1.jsonl", 10) == b""
    assert blobs.get_range("in/empty.jsonl", 0) == b""
    assert blobs.get_range("in/missing.jsonl", 0) is None
    assert blobs.get_range("in/missing.jsonl", 5) is None
