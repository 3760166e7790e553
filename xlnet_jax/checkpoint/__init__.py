"""The train state on storage: our orbax steps, and HuggingFace's weights in and out.

  train_state.py  TrainState, what a step saves
  checkpointer.py Checkpointer: async saves, restore with fallback past damaged steps
  meta.py, checksums.py, reader.py  what makes a step trustworthy
  orbax_adapter.py, tensorstore_adapter.py  every use of their private names, checked
  hf.py, export.py  HF XLNet weights and configs; export-hf
May import model, data and the base modules.
"""
