"""Fine-tuning: GLUE, RACE and your own labels on the pretrained encoder (`xlnet-jax finetune`).

  task.py       what a task provides (read, featurize, module, loss, predictions, metrics)
  registry.py   --task_name -> its Task; tasks/ the GLUE, RACE and generic tasks
  tsv.py        the reading rule (UTF-8, lines, TSV rows, JSON), errors by line
  text.py       text to ids as the pretrained model saw text (normalisation + pieces)
  features.py   A <sep> B <sep> <cls> rows, padded on the left, cut into segments
  metrics.py    the official metrics (Matthews, F1, Pearson, Spearman, accuracy)
  config.py     the fine-tuning config's defaults and checks
  prepare.py    the source model, its tokenizer and every split, read before anything runs
  forward.py    a task's module over a text's segments through the recurrence memory
  optim.py      Adam (TF's or AdamWeightDecay) with layer-wise decay of the gradients
  program.py    state on the mesh and the jitted train and predict steps
  batches.py    training batches as a function of (seed, step); evaluation batches in order
  train.py      fine-tuning as a program of the one loop (training/loop.py): its step,
                evaluations and the final evaluation's results
  predict.py    predictions and metrics of a split, and their files
  rerun.py      a rerun continues its workdir's run, or is refused in one line
  outputs.py    eval_results.json, predictions/, submissions, finetune.json
  seeds.py      --seeds N: each result and the median
  compile.py    `compile --task_name`: the fine-tuning step for a TPU slice or GPUs
  hf_ids.py     `export-hf --data_dir`: AutoTokenizer's ids against the run's, causes named
Imports training, run, checkpoint, model, data, config and errors.
"""
