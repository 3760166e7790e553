"""Argv lists for everything the launcher runs: gcloud, git, and the train or finetune
command itself.

Each function returns a plain argv list, executed without a shell. Flags are written
`--flag=value`, so no value can be read as a flag of its own (only ssh's fixed script
follows `--command` as its own item). `program_args` is shared by both backends: the TPU
backend runs `train` or `finetune` on every worker (`finetune` of a one-host slice on worker
0 alone, joining no coordinator) through `remote.train`, the local backend runs it N times
on localhost; only the cluster flags differ.
"""

import dataclasses
from collections.abc import Sequence

from xlnet_jax.launch import remote

GCLOUD_TPU = ["gcloud", "compute", "tpus", "tpu-vm"]
GCLOUD_QUEUED = ["gcloud", "compute", "tpus", "queued-resources"]
TPU_CLUSTER_FLAGS = ["--distributed"]  # On a pod slice JAX finds the coordinator itself.


def program_args(
    command: str,
    cluster_flags: Sequence[str],
    config: str,
    workdir: str,
    flags: Sequence[str],
) -> list[str]:
    """`COMMAND ...` arguments of the xlnet-jax command (`train`, `finetune`), after its
    program name: the cluster flags, the config and workdir, then `flags` in their order."""
    return [command, *cluster_flags, f"--config={config}", f"--workdir={workdir}", *flags]


def train_args(
    cluster_flags: Sequence[str], config: str, workdir: str, overrides: Sequence[str]
) -> list[str]:
    """`train ...` arguments of the xlnet-jax command, after its program name."""
    return program_args("train", cluster_flags, config, workdir, overrides)


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


@dataclasses.dataclass(frozen=True)
class Slice:
    """What `create` asks gcloud for, beyond the name and zone.

    queued: through a queued resource (needed for multislice: node_count > 1, whose
    nodes are named node_prefix-0, -1, ...; a single node gets the resource's name).
    service_account/scopes: the workers' identity; it needs write access to the bucket.
    """

    accelerator_type: str
    runtime_version: str
    queued: bool = False
    preemptible: bool = False
    spot: bool = False
    node_count: int | None = None
    node_prefix: str | None = None
    service_account: str | None = None
    scopes: str | None = None
    network: str | None = None
    subnetwork: str | None = None
    internal_ips: bool = False
    reserved: bool = False
    labels: str | None = None

    def flags(self) -> list[str]:
        """The optional gcloud flags, in a fixed order."""
        valued = {
            "service-account": self.service_account,
            "scopes": self.scopes,
            "network": self.network,
            "subnetwork": self.subnetwork,
            "labels": self.labels,
        }
        switches = {
            "internal-ips": self.internal_ips,
            "reserved": self.reserved,
            "preemptible": self.preemptible,
            "spot": self.spot,
        }
        return [f"--{k}={v}" for k, v in valued.items() if v] + [
            f"--{k}" for k, on in switches.items() if on
        ]


def create(name: str, zone: str, project: str | None, spec: Slice) -> list[str]:
    """Creates a TPU VM, or a queued resource (one node of the same name, or a multislice)."""
    if spec.queued:
        argv = [*GCLOUD_QUEUED, "create", name]
        if spec.node_count:
            argv += [f"--node-count={spec.node_count}", f"--node-prefix={spec.node_prefix or name}"]
        else:
            argv += [f"--node-id={name}"]
        version_flag = "--runtime-version"
    else:
        argv = [*GCLOUD_TPU, "create", name]
        version_flag = "--version"
    argv += [*_where(zone, project), f"--accelerator-type={spec.accelerator_type}"]
    return argv + [f"{version_flag}={spec.runtime_version}", *spec.flags()]


def delete(name: str, zone: str, project: str | None, queued: bool, yes: bool) -> list[str]:
    """Deletes the TPU VM; for a queued resource, `--force` also deletes its node."""
    argv = [*(GCLOUD_QUEUED if queued else GCLOUD_TPU), "delete", name, *_where(zone, project)]
    return argv + (["--force"] if queued else []) + (["--quiet"] if yes else [])


def describe(
    name: str, zone: str, project: str | None, queued: bool, state_only: bool = False
) -> list[str]:
    """Shows the TPU VM's (or queued resource's) state as gcloud reports it.

    state_only: just the state word (READY, PREEMPTED...; ACTIVE, SUSPENDED... if queued).
    """
    argv = [*(GCLOUD_QUEUED if queued else GCLOUD_TPU), "describe", name, *_where(zone, project)]
    if state_only:
        argv.append("--format=value(state.state)" if queued else "--format=value(state)")
    return argv


def ssh(
    name: str, zone: str, project: str | None, worker: str, script: str, queued: bool = False
) -> list[str]:
    """Runs `script` (from `remote`) on one worker or on all of them.

    queued: through the queued resource, on that worker of every node (`--node=all`), as a
    multislice needs.
    """
    where = _where(zone, project)
    head = [*GCLOUD_QUEUED, "ssh", name, *where, "--node=all"] if queued else [
        *GCLOUD_TPU, "ssh", name, *where
    ]  # fmt: skip
    # The script is a separate argv item: it never starts with "-", and so reads better.
    return [*head, f"--worker={worker}", "--command", script]


def scp_to_workers(
    name: str, zone: str, project: str | None, local_file: str, queued: bool = False
) -> list[str]:
    """Copies `local_file` to every worker's home (of every node, if queued) as TARBALL."""
    destination = f"{name}:{remote.TARBALL}"
    group = GCLOUD_QUEUED if queued else GCLOUD_TPU
    nodes = ["--node=all"] if queued else []
    return [*group, "scp", local_file, destination, *_where(zone, project), *nodes, "--worker=all"]


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


def local_finetune(
    program: Sequence[str],
    port: int | None,
    num_processes: int,
    num_cpu_devices: int | None,
    config: str,
    workdir: str,
    flags: Sequence[str],
) -> list[list[str]]:
    """The `program finetune ...` argv of each local process. One process joins no
    coordinator and has `num_cpu_devices` (None: JAX's own count); several join the one at
    `port` as `local_train`'s do, with `num_cpu_devices` each (None: 1)."""
    if num_processes == 1:
        devices = [] if num_cpu_devices is None else [f"--num_cpu_devices={num_cpu_devices}"]
        return [[*program, *program_args("finetune", devices, config, workdir, flags)]]
    assert port is not None, "several processes need the coordinator's port"
    return [
        [
            *program,
            *program_args(
                "finetune",
                local_cluster_flags(port, num_processes, i, num_cpu_devices or 1),
                config,
                workdir,
                flags,
            ),
        ]
        for i in range(num_processes)
    ]
