"""The Dataflow command of docs/corpus-scale.md: its options, and the package its workers
would install, built here without submitting a job."""

import os
import pathlib
import re
import shlex
import tarfile
import tempfile

from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    WorkerOptions,
)
from apache_beam.runners.portability.stager import Stager

from xlnet_jax.data.prepare import pipeline_options

REPO = pathlib.Path(__file__).resolve().parents[1]


def documented_beam_options() -> str:
    """The --beam_options string of the page's DataflowRunner command."""
    text = (REPO / "docs" / "corpus-scale.md").read_text().replace("\\\n", " ")
    command = next(line for line in text.splitlines() if "DataflowRunner" in line)
    (options,) = [a for a in shlex.split(command) if a.startswith("--beam_options=")]
    return options.removeprefix("--beam_options=")


def test_the_documented_dataflow_options_parse_and_stage_this_package(monkeypatch):
    monkeypatch.chdir(REPO)  # --setup_file=./setup.py is relative to the checkout
    options = PipelineOptions(pipeline_options("DataflowRunner", documented_beam_options(), 8))
    assert options.view_as(StandardOptions).runner == "DataflowRunner"
    cloud = options.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region) == ("PROJECT", "europe-west4")
    assert cloud.temp_location.startswith("gs://")
    assert options.view_as(WorkerOptions).max_num_workers == 64
    setup = options.view_as(SetupOptions)
    assert setup.setup_file == "./setup.py" and setup.sdk_location == "container"
    # The resources Beam would stage for the workers: this checkout as a source package
    # (no SDK download: the container has it), with the modules the pipeline runs.
    staging = tempfile.mkdtemp(prefix="dataflow-staging-")
    Stager.create_job_resources(options, staging)
    (package,) = [n for n in os.listdir(staging) if re.fullmatch(r"xlnet_jax-.*\.tar\.gz", n)]
    with tarfile.open(os.path.join(staging, package)) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for module in ("beam_prepare", "shard_writer", "sources", "tokenizer", "document_keys"):
        assert f"xlnet_jax/data/{module}.py" in names
    assert "setup.py" in names
