"""Indexes of Shar files, as lhotse 2 reads them (`lhotse.indexing`): `<file>.idx` beside an
uncompressed cuts `.jsonl` or a `.tar`, little-endian uint64 byte offsets, one per cut (a cuts
line; a tar's pair of members, data then manifest), then a sentinel.

The bytes are those lhotse's own `create_jsonl_index` / `create_tar_index` write for the same file
(a test compares them, tests/test_lhotse2.py): the jsonl sentinel is the file size; the tar sentinel
is where lhotse's streaming scan stops reading, the end of the 10,240-byte record that holds the
first block of the archive's end marker (the file size, or one record less where the marker
straddles a record boundary; past the last cut's members either way). A tar is indexed from its
headers alone (data is skipped, not read).
"""

import os
import tarfile

import numpy as np

INDEX_SUFFIX = ".idx"
_DTYPE = np.dtype("<u8")
_BLOCK = 512
_STREAM_READ = tarfile.RECORDSIZE  # what tarfile's stream mode reads at a time


def index_path(data_path: str) -> str:
    return str(data_path) + INDEX_SUFFIX


def jsonl_offsets(path: str) -> list[int]:
    """The byte offset of every line of an uncompressed jsonl file, then its size."""
    offsets, pos = [], 0
    with open(path, "rb") as f:
        for line in f:
            offsets.append(pos)
            pos += len(line)
    return [*offsets, pos]


def tar_offsets(path: str) -> list[int]:
    """The offset of the first header of every member pair of a Shar tar, then the sentinel.
    Raises ValueError for a tar that is not pairs of members."""
    with tarfile.open(path, "r:") as tar:
        members = tar.getmembers()
        end = tar.offset  # the archive's end marker
    if len(members) % 2:
        raise ValueError(f"{path}: {len(members)} members, not pairs of data and manifest")
    sentinel = min(os.path.getsize(path), -(-(end + _BLOCK) // _STREAM_READ) * _STREAM_READ)
    return [m.offset for m in members[::2]] + [sentinel]


def offsets_of(path: str) -> list[int]:
    """The index offsets of a cuts .jsonl or a .tar file."""
    return tar_offsets(path) if str(path).endswith(".tar") else jsonl_offsets(path)


def index_bytes(path: str) -> bytes:
    return np.asarray(offsets_of(path), dtype=_DTYPE).tobytes()


def indexed_line(path: str, position: int) -> bytes | None:
    """Line `position` of an indexed jsonl file, read at its offset (a seek, not a scan); None past
    its end."""
    offsets = np.fromfile(index_path(path), dtype=_DTYPE)
    if not 0 <= position < len(offsets) - 1:
        return None
    start, end = int(offsets[position]), int(offsets[position + 1])
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def write_index(data_path: str, out: str | None = None) -> str:
    """Write the index of `data_path` to `out` (default: beside it); returns its path. Not atomic by
    itself: shard jobs write it in their temp folder and rename it into place with the shard."""
    out = out or index_path(data_path)
    with open(out, "wb") as f:
        f.write(index_bytes(data_path))
    return out


def index_problem(data_path: str, idx: str | None = None) -> str | None:
    """Why the index of `data_path` does not describe it (missing, or other bytes than the file's
    own index), or None when it does."""
    idx = idx or index_path(data_path)
    try:
        with open(idx, "rb") as f:
            held = f.read()
    except FileNotFoundError:
        return f"{idx} is missing"
    try:
        want = index_bytes(data_path)
    except (ValueError, tarfile.TarError) as e:
        return f"{data_path} cannot be indexed: {e}"
    if held != want:
        return (
            f"{idx} does not match {os.path.basename(data_path)} "
            f"({len(held) // 8 - 1} entries held, {len(want) // 8 - 1} records in the file)"
        )
    return None
