"""Draft heads that read the target's features (Medusa, EAGLE, MTP): modules and drafters."""
