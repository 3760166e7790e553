"""The Triton (NVIDIA GPU) backend of the attention kernel; interpret mode runs it on a CPU."""
