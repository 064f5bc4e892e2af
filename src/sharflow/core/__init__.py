"""The small core every stage uses; it imports nothing from the stages.

atomic (files that appear whole), errors (messages for people), layout (every path), logs (job
logs), config (schema, defaults), parallel (ordered maps), ranks (a model job's ranks), balance
(LPT bin-packing), audio (paths inside the audio root, headers, the one span reader), speakers (the
NeMo speaker form), ledger (records in = out + rejected, reject files), metrics (the metric
registry), exports (lazy package entry points).
"""
