"""The TPU software version (the VM image) each TPU generation needs.

From Cloud TPU's software-versions page: `tpu-ubuntu2204-base` serves v4 and older; v5e
(accelerator types v5litepod-N), v5p and v6e have their own images. `create` picks the
image from the accelerator type; --runtime-version overrides it.
"""

import argparse

_BY_GENERATION = {
    "v2": "tpu-ubuntu2204-base",
    "v3": "tpu-ubuntu2204-base",
    "v4": "tpu-ubuntu2204-base",
    "v5litepod": "v2-alpha-tpuv5-lite",
    "v5e": "v2-alpha-tpuv5-lite",
    "v5p": "v2-alpha-tpuv5",
    "v6e": "v2-alpha-tpuv6e",
}


def runtime_version_for(accelerator_type: str) -> str:
    """The software version for `accelerator_type` (e.g. v5litepod-16 -> v2-alpha-tpuv5-lite)."""
    generation = accelerator_type.rsplit("-", 1)[0]
    try:
        return _BY_GENERATION[generation]
    except KeyError:
        known = ", ".join(sorted(_BY_GENERATION))
        raise argparse.ArgumentTypeError(
            f"no known software version for TPU generation {generation!r} (known: {known}); "
            "pass --runtime-version"
        ) from None
