"""The accelerators the project knows: one table of chips and cards, and how they are named.

  chips.py   each TPU generation and NVIDIA card: memory, dense bf16 peak, device kind,
             and (for the cards `compile --gpu` describes) XLA's target facts
  slices.py  TPU slices by Cloud accelerator type (v4-64) or libtpu topology (v4:2x4x4)
  gpus.py    abstract NVIDIA devices from a card's facts, for a compile without a GPU
Imports errors only (and jax, lazily, to describe GPU devices).
"""
