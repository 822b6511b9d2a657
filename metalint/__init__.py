"""metalint: make PyTorch modules safe to build on the ``meta`` device.

Importing this package has no side effects and does not import torch.
"""

__version__ = "0.1.0"
