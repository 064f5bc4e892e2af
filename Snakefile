# sharflow: NeMo manifests -> NeMo-compatible Lhotse Shar datasets for codec-LM TTS.
# Run: snakemake --profile profiles/local      Cluster: snakemake --profile profiles/slurm
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "rules/report/workflow.rst"


# ---- Workflow-wide Python (config validation, input functions), then the stages ----------------
include: "rules/common.smk"
include: "rules/segment.smk"
include: "rules/prepare.smk"
include: "rules/text.smk"
include: "rules/quality.smk"
include: "rules/identity.smk"
include: "rules/splits.smk"
include: "rules/context.smk"
include: "rules/shar.smk"
include: "rules/codes.smk"
include: "rules/catalog.smk"
include: "rules/training.smk"
include: "rules/verify.smk"
include: "rules/publish.smk"
include: "rules/plan.smk"
include: "rules/report.smk"


# ---- Targets -----------------------------------------------------------------------------------
rule all:
    default_target: True
    input:
        get_final_outputs(),
        *(get_repairs(name) for name in DATASETS + HELD_OUT_SETS),


# ---- At the end of a run ------------------------------------------------------------------------
onsuccess:
    warn_of_dropped_text()
