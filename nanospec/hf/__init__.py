"""Hugging Face GPT-2-family folders: read one in, write the shipped models out, pull one."""
