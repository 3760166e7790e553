"""Data side: tokenizer, corpus preparation and the recurrent batch streams."""
