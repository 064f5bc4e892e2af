"""Verify the catalog along the shards: the same cut ids in shard order, shard and position columns,
and codes frames per cut equal to the codes themselves; read a batch at a time."""

from sharflow.core.shar_fields import codes_fields
from sharflow.verify.shard import CodecInfo


class CatalogCheck:
    """Walks the catalog along the shards' results: same ids in shard order, shard and position
    columns, and codes frames per cut equal to the codes themselves. Reads a batch at a time."""

    def __init__(self, dataset: str, path: str, codecs: tuple[CodecInfo, ...], split: str | None = None):
        from sharflow.dataset.catalog import column_names, iter_batches

        self.dataset, self.path = dataset, path
        self.frames = {}  # codes field label -> catalog column
        for codec in codecs:
            target, context = codes_fields(codec.name)
            self.frames[target.label] = f"frames_{codec.name}"
            self.frames[context.label] = f"context_frames_{codec.name}"
        self.columns = ["cut_id", "shard", "position", *self.frames.values()]
        self.problems: list[str] = []
        missing = [c for c in self.columns if c not in column_names(path)]
        if missing:
            self.problems.append(f"dataset {dataset}, catalog {path}: no column(s) {', '.join(missing)}")
            self.columns = [c for c in self.columns if c not in missing]
        self._batches = iter_batches(path, self.columns, split=split or "train")  # the set's own rows
        self._buffer: dict[str, list] = {c: [] for c in self.columns}
        self._at = 0
        self.rows = 0

    def _next_shard(self) -> int | None:
        """The shard column of the next row, loading a batch when the buffer is used up."""
        while self._at >= len(self._buffer["cut_id"]):
            batch = next(self._batches, None)
            if batch is None:
                return None
            self._buffer, self._at = batch.to_pydict(), 0
        return self._buffer["shard"][self._at] if "shard" in self._buffer else None

    def _take_shard(self, shard: int) -> dict[str, list]:
        """The consecutive rows whose shard column is `shard` (none if the next row is another's)."""
        out: dict[str, list] = {c: [] for c in self.columns}
        while self._next_shard() == shard:
            end = self._at
            column = self._buffer["shard"]
            while end < len(column) and column[end] == shard:
                end += 1
            for c in self.columns:
                out[c] += self._buffer[c][self._at : end]
            self._at = end
        self.rows += len(out["cut_id"])
        return out

    def shard(self, result: dict) -> None:
        """Compare the catalog's rows of one shard with that shard's verify result.

        A shard whose files have problems has its rows passed over, unchecked: its problems are
        already reported, and the next shard's rows still line up.
        """
        shard, ids = result["shard"], result["ids"]
        rows = self._take_shard(shard)
        if result["problems"]:
            return
        where = f"dataset {self.dataset}, catalog {self.path}, shard {shard}"
        if rows["cut_id"] != ids:
            got = len(rows["cut_id"])
            pairs = zip(rows["cut_id"], ids, strict=False)
            first = next((i for i, (a, b) in enumerate(pairs) if a != b), min(got, len(ids)))
            found = rows["cut_id"][first] if first < got else "no row"
            expected = ids[first] if first < len(ids) else "no more cuts"
            self.problems.append(
                f"{where}: row {first} of the shard is {found!r}, the cuts file has {expected!r} "
                "(rows must be the cuts in shard order)"
            )
            return
        if rows.get("position") != list(range(len(ids))):
            self.problems.append(
                f"{where}: the position column does not number the shard's cuts 0..{len(ids) - 1}"
            )
        for label, frames in sorted(result["cut_frames"].items()):
            column = self.frames.get(label)
            if column in rows and rows[column] != frames:
                i = next(i for i, (a, b) in enumerate(zip(rows[column], frames, strict=True)) if a != b)
                self.problems.append(
                    f"{where}, cut {ids[i]}: catalog {column} = {rows[column][i]}, "
                    f"the {label} codes have {frames[i]} frames"
                )

    def finish(self, cuts: int) -> list[str]:
        extra = max(len(self._buffer["cut_id"]) - self._at, 0) + sum(b.num_rows for b in self._batches)
        if extra:
            self.problems.append(
                f"dataset {self.dataset}, catalog {self.path}: {extra} row(s) beyond the {cuts} cuts "
                "of the shards"
            )
        return self.problems
