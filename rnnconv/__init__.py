"""rnnconv: convert recurrent-network weights between Keras, PyTorch and cuDNN, and prove them right."""

__version__ = "0.1.0"
