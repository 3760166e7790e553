"""Training: the program (model, optimiser, jitted steps over a mesh) and the loop.

  program.py     build_program: the one place the train step is jitted
  steps.py       train and eval steps; placement.py, sharding.py lay them on the mesh
  optim.py       AdamW with warmup and decay
  replicas.py    the original's per-core clip (pretraining's and fine-tuning's option)
  train.py       the loop: resume, checkpoints, metrics, progress line, profiling
  evaluate.py    held-out evaluation; metrics.py, progress.py, profiling.py report
  run_config.py  the run's saved config and what a resume may change
  run_versions.py  the package versions a run records, and the check at start
  aot.py         AOT compile for TPU topologies and NVIDIA cards from any host;
                 aot_devices.py what it compiles for
May import run, checkpoint, objective, model, data and the base modules.
"""
