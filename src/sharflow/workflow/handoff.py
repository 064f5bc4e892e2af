"""What the jobs after the Shar sets read: the catalogs' held-out plans, the training hand-off
(input_cfg, validation_ds), the dataset cards, the report and publish.

Each method is an input function or a params function of a rule (rules/catalog.smk,
rules/training.smk, rules/report.smk, rules/publish.smk), over the config and the layout.
"""

from sharflow.core import layout


class Handoff:
    """Input and params functions of the catalog, training hand-off, card, report and publish jobs."""

    def __init__(self, run, shards):
        self.run = run
        self.config = run.config
        self.shards = shards  # sharflow.workflow.shards.Shards: the jobs' records

    # ---- catalog and codes stats ---------------------------------------------------------------
    def held_out_plans(self, wildcards) -> list | None:
        """[(split, shard plan)] of the dataset's held-out Shar sets (None without splits): the catalog's
        rows after the dataset's own."""
        sets = self.run.held_out_sets_of(wildcards.dataset)
        if not sets:
            return None
        return [[self.run.split_of(name), layout.dataset_files(name).shard_plan] for name in sets]

    def held_out_job_records(self, wildcards) -> list[str]:
        """The shar job records of the dataset's held-out Shar sets (their catalog fragments are done)."""
        sets = self.run.held_out_sets_of(wildcards.dataset)
        return [path for name in sets for path in self.shards.job_records(name, "shar")]

    def codes_stats(self, wildcards) -> dict:
        """{codec: codes stats file} of the dataset."""
        return {
            codec: layout.dataset_files(wildcards.dataset).codes_stats(codec) for codec in self.run.codecs
        }

    # ---- training hand-off --------------------------------------------------------------------
    def validation_codes_stats(self, wildcards) -> list[str]:
        codec = self.run.training_codec()
        if not codec:
            return []
        return [layout.dataset_files(name).codes_stats(codec) for name in self.validation_sets(wildcards)]

    def training_codes_stats(self, wildcards) -> list[str]:
        codec = self.run.training_codec()
        return [layout.dataset_files(ds).codes_stats(codec) for ds in self.run.datasets] if codec else []

    def training_datasets(self, wildcards) -> dict:
        """Arguments of sharflow.dataset.training.write_input_cfg for every dataset."""
        out = {}
        for ds in self.run.datasets:
            files = layout.dataset_files(ds)
            out[ds] = {"shar_dir": files.shar_dir, "plan": files.shard_plan, "catalog": files.catalog}
            out[ds].update({k: self.config["datasets"][ds][k] for k in ("weight", "tags", "language")})
        return out

    def validation_sets(self, wildcards) -> dict:
        """Arguments of sharflow.dataset.training.write_input_cfg for every dev split's Shar set."""
        out = {}
        for name in self.run.held_out_sets:
            dataset, split = layout.set_of(name)
            if split.startswith("dev_"):
                files = layout.dataset_files(name)
                out[name] = {
                    "shar_dir": files.shar_dir,
                    "plan": files.shard_plan,
                    "catalog": layout.dataset_files(dataset).catalog,
                    "split": split,
                    "weight": None,
                    "tags": {"dataset": dataset, **self.config["datasets"][dataset]["tags"], "split": split},
                }
        return out

    # ---- card and report ----------------------------------------------------------------------
    def card_inputs(self, wildcards) -> dict:
        """The dataset card's files: catalog, buckets, verify, the text stats; a long_form dataset's
        segment stats; with splits its splits stats, and the identity job's stats."""
        files = layout.dataset_files(wildcards.dataset)
        out = {
            "catalog": files.catalog,
            "buckets": files.buckets,
            "verify": files.verify,
            "text": files.text_stats,
        }
        if wildcards.dataset in self.run.datasets and self.run.long_form(wildcards.dataset):  # not a split's
            out["segment"] = files.segment_stats
        if self.run.splits:
            out["splits"] = files.split_stats
        if self.run.identity:
            out["identity"] = layout.IDENTITY_STATS
            out["plan"] = files.shard_plan
        return out

    def report_datasets(self, wildcards) -> dict:
        """Arguments of sharflow.report.report.write_report: every stats file of every dataset."""
        out = {}
        for ds in self.run.datasets:
            files = layout.dataset_files(ds)
            out[ds] = {
                "prepare": files.prepare_stats,
                "text": files.text_stats,
                "context": files.context_stats,
                "shar": files.shar_stats,
                "codes": {codec: files.codes_stats(codec) for codec in self.run.codecs},
                "buckets": files.buckets,
                "verify": files.verify,
                "catalog": files.catalog,
            }
            if self.run.quality:
                measured = {"records": files.text_records, "quality_metrics": files.quality_metrics}
                out[ds].update(quality=files.quality_stats, **measured)
            if self.run.splits:
                out[ds]["splits"] = files.split_stats
            if self.run.identity:
                out[ds]["identity"] = layout.IDENTITY_STATS
            if self.run.long_form(ds):
                out[ds]["segment"] = files.segment_stats
        return out

    def report_inputs(self, wildcards) -> list[str]:
        """Every file of report_datasets."""
        inputs = []
        for files in self.report_datasets(wildcards).values():
            inputs += [path for key, path in files.items() if key != "codes"]
            inputs += files["codes"].values()
        return inputs

    # ---- publish ------------------------------------------------------------------------------
    def publish_inputs(self, wildcards) -> dict:
        """What the publish job uploads, finished and verified: every Shar set's verification, catalog,
        bucket bins and card, the evaluation sets, input_cfg and validation_ds."""
        files = [layout.dataset_files(name) for name in self.run.datasets]
        return {
            "verify": [
                layout.dataset_files(name).verify for name in self.run.datasets + self.run.held_out_sets
            ],
            "datasets": [path for f in files for path in (f.catalog, f.buckets, f.dataset_card)],
            "evaluation": [layout.dataset_files(name).evaluation for name in self.run.test_sets],
            "handoff": [layout.INPUT_CFG] + ([layout.VALIDATION_DS] if self.run.held_out_sets else []),
        }
