"""NVIDIA cuDNN 9 through ctypes: bindings, descriptors, and the verify backend."""
