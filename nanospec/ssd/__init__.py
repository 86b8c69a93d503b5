"""Speculative speculative decoding: the loop, its fan-outs, and the two-device driver."""
