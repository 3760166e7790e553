"""Argv lists for everything the launcher runs: gcloud, git, and the train command itself.

Each function returns a plain argv list, executed without a shell. Flags are written
`--flag=value`, so no value can be read as a flag of its own (only ssh's fixed script
follows `--command` as its own item). `train_args` is shared by both backends: the TPU
backend runs it on every worker through `remote.train`, the local backend runs it N
times on localhost; only the cluster flags differ.
"""

from collections.abc import Sequence

from xlnet_jax.launch import remote

GCLOUD_TPU = ["gcloud", "compute", "tpus", "tpu-vm"]
GCLOUD_QUEUED = ["gcloud", "compute", "tpus", "queued-resources"]
TPU_CLUSTER_FLAGS = ["--distributed"]  # On a pod slice JAX finds the coordinator itself.


def train_args(
    cluster_flags: Sequence[str], config: str, workdir: str, overrides: Sequence[str]
) -> list[str]:
    """`train ...` arguments of the xlnet-jax command, after its program name."""
    return ["train", *cluster_flags, f"--config={config}", f"--workdir={workdir}", *overrides]


def local_cluster_flags(
    port: int, num_processes: int, process_id: int, num_cpu_devices: int
) -> list[str]:
    """Cluster flags for process `process_id` of `num_processes` on localhost."""
    return [
        f"--coordinator_address=127.0.0.1:{port}",
        f"--num_processes={num_processes}",
        f"--process_id={process_id}",
        f"--num_cpu_devices={num_cpu_devices}",
    ]


def _where(zone: str, project: str | None) -> list[str]:
    return [f"--zone={zone}"] + ([f"--project={project}"] if project else [])


def create(
    name: str,
    zone: str,
    project: str | None,
    accelerator_type: str,
    runtime_version: str,
    queued: bool,
    preemptible: bool,
    spot: bool,
) -> list[str]:
    """Creates a TPU VM, or a queued resource whose node has the same name."""
    if queued:
        argv = [*GCLOUD_QUEUED, "create", name, f"--node-id={name}"]
        version_flag = "--runtime-version"
    else:
        argv = [*GCLOUD_TPU, "create", name]
        version_flag = "--version"
    argv += [*_where(zone, project), f"--accelerator-type={accelerator_type}"]
    argv += [f"{version_flag}={runtime_version}"]
    return argv + (["--preemptible"] if preemptible else []) + (["--spot"] if spot else [])


def delete(name: str, zone: str, project: str | None, queued: bool, yes: bool) -> list[str]:
    """Deletes the TPU VM; for a queued resource, `--force` also deletes its node."""
    argv = [*(GCLOUD_QUEUED if queued else GCLOUD_TPU), "delete", name, *_where(zone, project)]
    return argv + (["--force"] if queued else []) + (["--quiet"] if yes else [])


def describe(name: str, zone: str, project: str | None, queued: bool) -> list[str]:
    """Shows the TPU VM's (or queued resource's) state as gcloud reports it."""
    return [*(GCLOUD_QUEUED if queued else GCLOUD_TPU), "describe", name, *_where(zone, project)]


def ssh(name: str, zone: str, project: str | None, worker: str, script: str) -> list[str]:
    """Runs `script` (from `remote`) on one worker or on all of them."""
    where = _where(zone, project)
    # The script is a separate argv item: it never starts with "-", and so reads better.
    return [*GCLOUD_TPU, "ssh", name, *where, f"--worker={worker}", "--command", script]


def scp_to_workers(name: str, zone: str, project: str | None, local_file: str) -> list[str]:
    """Copies `local_file` to every worker's home as `remote.TARBALL`."""
    destination = f"{name}:{remote.TARBALL}"
    return [*GCLOUD_TPU, "scp", local_file, destination, *_where(zone, project), "--worker=all"]


def source_tarball(source_dir: str, tarball: str) -> list[str]:
    """Packs the committed tree (HEAD) of the git checkout `source_dir` into `tarball`."""
    return ["git", "-C", source_dir, "archive", "--format=tar.gz", f"--output={tarball}", "HEAD"]


def local_train(
    program: Sequence[str],
    port: int,
    num_processes: int,
    num_cpu_devices: int,
    config: str,
    workdir: str,
    overrides: Sequence[str],
) -> list[list[str]]:
    """One `program train ...` argv per local process, all with the same coordinator."""
    return [
        [
            *program,
            *train_args(
                local_cluster_flags(port, num_processes, i, num_cpu_devices),
                config,
                workdir,
                overrides,
            ),
        ]
        for i in range(num_processes)
    ]
