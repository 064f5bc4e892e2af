"""How a job's work is split, spread and resumed, the floor the stages' jobs run on.

parts (a per-record stage's parts, by audio seconds), balance (LPT bin-packing), parallel (ordered
maps over worker processes), ranks (a model job's ranks on GPUs or CPU processes: `rank_job`), jobs
(shard jobs over blocks: which job makes which shards, damage), resume (a shard job keeps what it
made), memory (freed memory given back between a CPU model's batches), warm (a local run's jobs as
forks of one server that imported the frameworks once). It stands on sharflow.core and sharflow.io
and imports no stage (warm's server imports the stages' job modules by name, to preload them).
"""
