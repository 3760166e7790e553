"""Fine-tuning: GLUE, RACE and your own labels on the pretrained encoder (`xlnet-jax finetune`).

  task.py       what a task provides (read, featurize, module, loss, predictions, metrics)
  text.py       text to ids as the pretrained model saw text (normalisation + pieces)
Imports training, run, checkpoint, model, data, config and errors.
"""
