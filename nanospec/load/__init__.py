"""Measuring a server under load: load generator, load test, its report, soak, crossover."""
