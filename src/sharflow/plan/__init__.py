"""The cost plan (docs: cost): know the bill before the run.

`snakemake plan` prepares every dataset in full, draws a seeded sample of each stratified by
duration (sample), runs the whole workflow on the samples through the same profile in a folder of
its own (calibrate), and extrapolates every job's measured cost to the whole corpus by what drives
it (model), into results/plan/{plan.json, plan.md} (build, page) and resources.yaml, which the
rules' mem_mb and runtime read from then on (resources).
"""
