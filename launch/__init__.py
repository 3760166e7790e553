"""Launch xlnet-jax training: on a TPU VM pod slice through gcloud, or as N local processes.

`launch.pod` is the command line (`xlnet-jax launch ...`, `python -m launch.pod ...`);
`launch.commands` and `launch.remote` build what it runs; `launch.runner` and
`launch.local` run it.
"""
