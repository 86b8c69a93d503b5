"""Serving: the continuous-batching engine, adaptive γ, the OpenAI-compatible HTTP server."""
