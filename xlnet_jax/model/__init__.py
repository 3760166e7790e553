"""The network: XLNet's two-stream relative attention, its positions, FLOPs and kernels.

  xlnet.py      XLNetLM, the Flax module (embeddings, layers with memory, LM head)
  attention.py  two-stream relative attention (XLA path or the fused kernel)
  position.py   relative positional encodings and each row's window of scores
  flops.py      the model's FLOPs per step (MFU's numerator)
  encoder.py    XLNetEncoder: the content stream alone, with padding masks and memory
  heads.py      SequenceHead: the summary at <cls> and one projection (fine-tuning)
  kernels/      the fused Pallas attention kernel and its masks
Imports config and errors only.
"""

from xlnet_jax.model.xlnet import XLNetLM, validate_model_config

__all__ = ["XLNetLM", "validate_model_config"]
