"""The train state on storage: our orbax steps, and HuggingFace's weights in and out.

  train_state.py  TrainState, what a step saves
  checkpointer.py Checkpointer: async saves, restore with fallback past damaged steps
  meta.py, checksums.py, reader.py, orbax_drain.py  what makes a step trustworthy
  hf.py, export.py  HF XLNet weights and configs; export-hf
May import model, data and the base modules.
"""
