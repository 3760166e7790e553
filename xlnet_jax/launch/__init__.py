"""Launch xlnet-jax training or fine-tuning: on a TPU VM slice through gcloud, or locally.

`pod` is the command line (`xlnet-jax launch ...`, `python -m xlnet_jax.launch.pod ...`);
`commands` and `remote` build what it runs, `shell` writes it as shell text; `runner`, `job`
and `local` run it, under the restart policy of `restarts`. `supervise` is the thin parent
of each multi-process trainer (a lost peer becomes one line and exit code 5); `emulator` a
local GCS for rehearsals.
Imports nothing else of xlnet_jax but its errors: it ships the package and runs its CLI on
the workers.
"""
