"""nanospec: speculative decoding from scratch."""
