"""Pallas kernels: XLNet's relative attention without [Q, K] score tensors in HBM."""
