"""The permutation-LM objective, sampled inside the jitted step from (seed, step).

  plm.py    factorisation orders, exact target counts, the two streams' masks
  spans.py  whole-word span sampling of the targets
Imports model.kernels.masks (the mask vocabulary the model consumes), config and errors.
"""
