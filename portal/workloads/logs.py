"""A workload's whole output, from its fabric, for the log page (paged) and the download (streamed)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from fabrics import base as fabric_base
from fabrics.registry import connect
from portal.workloads.models import Workload

PAGE_BYTES = 64 * 1024
STREAM_BYTES = 256 * 1024


@dataclass(frozen=True)
class Page:
    text: str
    start: int  # byte offsets into the whole output
    end: int
    total: int
    whole: bool  # False where the fabric only gives the end of the output
    earlier: int | None  # the offset of the page before, None at the start
    later: int | None


def page(w: Workload, offset: int | None) -> Page:
    """One page of output at line boundaries: from `offset`, or the last page; the worker's stored tail where the
    workload never reached a fabric or the fabric cannot be asked."""
    # One byte more, before the page: whether the page begins a line.
    chunk = _chunk(w, None if offset is None else max(0, offset - 1), PAGE_BYTES + 1)
    data, start = chunk.data, chunk.start
    if start > 0 and b"\n" in data:  # begin at a whole line; a cut line belongs to the page before
        cut = data.index(b"\n") + 1
        data, start = data[cut:], start + cut
    end = start + len(data)
    if end < chunk.total and b"\n" in data:  # end at a whole line
        data = data[: data.rindex(b"\n") + 1]
        end = start + len(data)
    return Page(
        text=data.decode("utf-8", "replace"),
        start=start,
        end=end,
        total=chunk.total,
        whole=chunk.whole,
        earlier=max(0, start - PAGE_BYTES) if start > 0 else None,
        later=end if end < chunk.total else None,
    )


def stream(w: Workload) -> Iterator[bytes]:
    """The whole output, read in chunks as it is sent."""
    offset = 0
    while True:
        chunk = _chunk(w, offset, STREAM_BYTES)
        if chunk.data:
            yield chunk.data
        offset = chunk.start + len(chunk.data)
        if not chunk.data or offset >= chunk.total:
            return


def _chunk(w: Workload, offset: int | None, length: int) -> fabric_base.LogChunk:
    if w.fabric is not None and w.external_id:
        try:
            return fabric_base.read_log(connect(w.fabric.to_config()), w.external_id, offset, length)
        except (fabric_base.FabricError, OSError):
            pass  # the fabric is away: what the worker last read is all there is
    stored = w.log_tail.encode("utf-8", "replace")
    start = max(0, len(stored) - length) if offset is None else min(max(0, offset), len(stored))
    return fabric_base.LogChunk(stored[start : start + length], start, len(stored), whole=False)
