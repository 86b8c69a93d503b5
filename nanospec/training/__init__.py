"""Training the shipped models: tokenizer, target and draft (lm.py), heads (heads.py)."""
