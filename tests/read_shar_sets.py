"""Read Shar sets with whatever lhotse is importable and print what was read, as JSON (run by
tests/test_lhotse2.py under lhotse 1.33, the project's, and under lhotse 2 installed apart).

argv[1]: a JSON file of {"sets": {name: {field: [shard files]}}, "indexed": bool}. For every set:
each cut in order, as a digest of its id, duration, text and the bytes of every field's data
(target and context audio samples, codes arrays); with "indexed", lhotse 2's random access to the
set's last cut (by index, no scan), and for every file the index lhotse 2's own writer makes of it.
"""

import hashlib
import json
import os
import sys
import tempfile
import time


def digest(cut, fields) -> str:
    h = hashlib.blake2b(digest_size=16)
    sup = cut.supervisions[0]
    h.update(json.dumps([cut.id, cut.duration, sup.text, sup.speaker]).encode())
    for field in fields:
        value = cut.custom[field]  # the Shar field's manifest, its data attached (whole, not cut.start on)
        data = value.load_audio() if hasattr(value, "load_audio") else value.load()
        h.update(field.encode() + str(data.dtype).encode() + str(data.shape).encode() + data.tobytes())
    return h.hexdigest()


def own_indexes(fields: dict) -> dict:
    """{file: whether its .idx holds the bytes lhotse's own index writer makes of it}."""
    from lhotse.indexing import create_jsonl_index, create_tar_index

    same = {}
    with tempfile.TemporaryDirectory() as tmp:
        for paths in fields.values():
            for path in paths:
                out = os.path.join(tmp, os.path.basename(path) + ".idx")
                (create_tar_index if path.endswith(".tar") else create_jsonl_index)(path, output_path=out)
                with open(out, "rb") as theirs, open(path + ".idx", "rb") as ours:
                    same[path] = theirs.read() == ours.read()
    return same


def main() -> None:
    import lhotse
    from lhotse import CutSet

    with open(sys.argv[1]) as f:
        spec = json.load(f)
    out = {"version": lhotse.__version__, "sets": {}}
    for name, fields in spec["sets"].items():
        data = [f for f in fields if f != "cuts"]
        kwargs = {"indexed": True} if spec["indexed"] else {}
        cuts = CutSet.from_shar(fields=fields, **kwargs)
        read = {"cuts": [[c.id, digest(c, data)] for c in cuts]}
        if spec["indexed"]:
            reader = cuts.data  # lhotse 2's LazyIndexedSharIterator
            start = time.perf_counter()
            last = reader[len(reader) - 1]
            read["last"] = [last.id, digest(last, data), time.perf_counter() - start]
            read["reader"] = type(reader).__name__
            read["own_indexes"] = own_indexes(fields)
        out["sets"][name] = read
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
