"""Launch xlnet-jax training: on a TPU VM pod slice through gcloud, or as N local processes.

`pod` is the command line (`xlnet-jax launch ...`, `python -m xlnet_jax.launch.pod ...`);
`commands` and `remote` build what it runs; `runner` and `local` run it. Imports nothing else
of xlnet_jax: it ships the package and runs its CLI on the workers.
"""
