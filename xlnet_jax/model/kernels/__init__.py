"""Pallas kernels: XLNet's relative attention without [Q, K] score tensors in HBM.

tpu/         the Mosaic kernel (TPU): attention.py, forward.py, backward.py, tiles.py
gpu/         the Triton kernel (NVIDIA GPUs): attention.py, forward.py, backward.py, tiles.py
masks.py     the permutation mask as O(B·L) vectors, rebuilt per tile (both backends)
dropout.py   attention dropout as a pure function of (word, query, key) (both backends)
matmul.py    the tile products in float32 (both backends)
backends.py  which backend runs, from the chip the step is traced for
mesh.py      the kernel per shard of the active mesh, and the chip traced for
cost.py      what a kernel call costs, for XLA's cost analysis (both backends)
agreement.py how closely the kernel must agree with the XLA path (gpu_check, kernel_check)
"""
