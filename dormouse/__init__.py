"""dormouse: honest A/B comparisons of residual mechanisms in a weight-shared, looped byte-level LM."""

__version__ = "0.1.0"
