"""Memory-mapped source pages a compile has finished with, dropped from the process.

A compile reads each weight once from a memory-mapped checkpoint. Every page it touched stays
in its resident set (and its peak RSS) until the mapping goes, so a compile of a 16 GB file
would report a 16 GB RSS although those pages are only page cache. Once a weight is written
its pages are given back with `madvise(MADV_DONTNEED)`: for a read-only file mapping that only
unmaps them; the kernel keeps them cached, and touching them again reads them back.
"""

from __future__ import annotations

import mmap


def release_pages(buf, offset: int, nbytes: int) -> None:
    """`madvise(MADV_DONTNEED)` over the pages of `buf` (an `mmap.mmap`) that `[offset, offset + nbytes)` touches."""
    advise = getattr(buf, "madvise", None)
    if advise is None or not hasattr(mmap, "MADV_DONTNEED") or nbytes <= 0:
        return
    start = offset - offset % mmap.PAGESIZE
    length = min(offset + nbytes, len(buf)) - start
    try:
        advise(mmap.MADV_DONTNEED, start, length)
    except (OSError, ValueError):
        pass  # only a hint: the pages stay resident
