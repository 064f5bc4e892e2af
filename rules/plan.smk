# The cost plan (docs: cost): snakemake --profile <profile> plan
rule calibration_sample:
    input:
        unpack(get_calibration_source),
    output:
        sample=layout.calibration_sample("{dataset}"),
        small=layout.calibration_small("{dataset}"),
        summary=layout.calibration_summary("{dataset}"),
    log:
        layout.log("calibration_sample", "{dataset}"),
    params:
        size=config["plan"]["sample_records"],
        hours=config["plan"]["sample_hours"],
        seed=config["plan"]["seed"],
    resources:
        mem_mb=RESOURCES.mem_mb("calibration_sample"),
        runtime=RESOURCES.runtime("calibration_sample"),
    script:
        "../workflow_scripts/calibration_sample.py"


# The whole workflow on the samples, in results/plan/calibration, through this run's profile: a job
# of this process (localrule) that starts snakemake there and waits for it.
localrules:
    calibration,
    cost_plan,
    plan,


rule calibration:
    input:
        samples=expand(layout.calibration_sample("{dataset}"), dataset=DATASETS),
        smalls=expand(layout.calibration_small("{dataset}"), dataset=DATASETS),
    output:
        done=layout.CALIBRATION_DONE,
    log:
        layout.log("calibration"),
    params:
        config=config,
        snakefile=workflow.main_snakefile,
        options=CALIBRATION_OPTIONS,
        datasets=DATASETS,
    threads: workflow.cores
    script:
        "../workflow_scripts/calibration.py"


rule cost_plan:
    input:
        done=layout.CALIBRATION_DONE,
        summaries=expand(layout.calibration_summary("{dataset}"), dataset=DATASETS),
    output:
        plan=layout.PLAN,
        page=layout.PLAN_PAGE,
        dot=layout.PLAN_DOT,
        resources=layout.PLAN_RESOURCES,
    log:
        layout.log("cost_plan"),
    params:
        config=config,
        datasets=DATASETS,
        slots=workflow.nodes or workflow.cores,
        logs=layout.LOGS,
        inputs={ds: get_plan_inputs(ds) for ds in DATASETS},
    script:
        "../workflow_scripts/cost_plan.py"


rule plan:
    input:
        layout.PLAN,
        layout.PLAN_PAGE,
        layout.PLAN_RESOURCES,


# After the real run: the plan's stages beside what the run's jobs measured (docs: cost)
rule plan_vs_actual:
    input:
        plan=layout.PLAN,
        resources=layout.PLAN_RESOURCES,
        outputs=get_final_outputs(),
    output:
        json=layout.PLAN_ACTUAL,
        page=layout.PLAN_ACTUAL_PAGE,
    log:
        layout.log("plan_vs_actual"),
    params:
        logs=layout.LOGS,
        slurm_efficiency=layout.SLURM_EFFICIENCY,
    resources:
        mem_mb=RESOURCES.mem_mb("plan_vs_actual"),
        runtime=RESOURCES.runtime("plan_vs_actual"),
    script:
        "../workflow_scripts/plan_vs_actual.py"
