"""tensorstore's gcs driver (it writes and reads orbax's arrays) under the one retry policy.

tensorstore's part is public: the `gcs_request_retries` context resource (max_retries,
initial_delay, max_delay). Where it goes is orbax's private part (orbax_adapter.py: the
context specs orbax builds every array access from). `use_gcs_retries` checks first that
this tensorstore still accepts the resource as written, then sets it.
"""

import tensorstore as ts

from xlnet_jax import paths
from xlnet_jax.checkpoint import orbax_adapter
from xlnet_jax.paths.library import changed

LIBRARY = "tensorstore"
RESOURCE = "gcs_request_retries"


def gcs_retries(policy: paths.RetryPolicy) -> dict:
    """The `gcs_request_retries` resource of `policy`: its attempts and delays."""
    return {
        "max_retries": policy.attempts,
        "initial_delay": f"{policy.first_delay_s}s",
        "max_delay": f"{policy.max_delay_s}s",
    }


def use_gcs_retries(policy: paths.RetryPolicy) -> None:
    """Gives every tensorstore context orbax makes the policy's gcs retries."""
    retries = gcs_retries(policy)
    try:
        ts.Context(ts.Context.Spec({RESOURCE: retries}))
    except (TypeError, ValueError) as e:
        raise changed(LIBRARY, f"the context resource {RESOURCE} is refused ({e})") from None
    for context in orbax_adapter.tensorstore_contexts():
        context[RESOURCE] = retries
