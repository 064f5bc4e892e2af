"""The small core every stage uses; it imports nothing from the floors above it.

atomic (files that appear whole), errors (messages for people), layout (every path), shards (shard
and block numbering, the Shar fields, a plan's shards), logs (job logs), config (schema, defaults),
cache (sharflow's cache folder and its keys), jsonl (JSON-lines by position), speakers (the NeMo
speaker form), splits (which split a record is in), ledger (records in = out + rejected, reject
files), metrics (the metric registry), exports (lazy package entry points).
"""
