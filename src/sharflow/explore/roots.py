"""Where the explorer may read: the run's folder, its results (wherever a symlink puts them) and the
datasets' audio roots. Every file the explorer opens is asked of `Roots.confine` first.

An address is read the way the readers read it (sharflow.io.containers.split_member): the container
of `shard.tar#member` is the tar, and a plain path is its own container. The container alone decides:
a URL only when the container is one, under a URL root (folded lexically: `..` cannot climb out); a
local file only when its real path (every symlink resolved) lies under a local root's real path. So
`d#/x.wav` (a folder `d#` holding a symlink) and `a.tar#s3://m.wav` (a symlinked tar) are checked as
the files that would be opened, not as what the text looks like.

Example::

    roots = Roots(["/runs/r1", "/data/audio", "s3://corpora/emilia"])
    roots.confine("/data/audio/a.tar#x/1.flac")   # the address, or OutsideRoots
"""

import os

from sharflow.io import storage
from sharflow.io.containers import split_member


class OutsideRoots(LookupError):
    """An address outside every root (or one the explorer cannot tell is inside): answered as not found."""


class Roots:
    """The folders and URL prefixes the explorer reads under."""

    def __init__(self, roots: list[str]):
        self.urls = sorted({storage.normalize_url(r).rstrip("/") + "/" for r in roots if storage.is_url(r)})
        self.local = sorted({os.path.join(os.path.realpath(r), "") for r in roots if not storage.is_url(r)})

    def confine(self, address: str) -> str:
        """`address` (a file, an object, or a member of either) when what would be opened lies under a
        root; OutsideRoots otherwise."""
        container, _ = split_member(str(address))
        if storage.is_url(container):
            inside = (storage.normalize_url(container) + "/").startswith(tuple(self.urls))
        else:
            inside = (os.path.realpath(container) + os.sep).startswith(tuple(self.local))
        if not inside:
            raise OutsideRoots(address)
        return address

    def present(self, address: str) -> bool:
        """Whether `address` is confined and its container can be opened (a local one exists; an
        object is taken to, asking the store nothing)."""
        try:
            container, _ = split_member(self.confine(address))
        except OutsideRoots:
            return False
        return storage.is_url(container) or os.path.isfile(container)
