"""The Mosaic (TPU) backend of the attention kernel; interpret mode runs it on a CPU."""
