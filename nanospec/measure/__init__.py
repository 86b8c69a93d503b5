"""Measuring one run: bench and eval, acceptance by position, SSD's hits, workloads, tables."""
