"""rnnconv's version: bumped whenever the sidecar schema or the weight-space layout version changes."""

__version__ = "0.4.0"
