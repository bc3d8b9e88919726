"""jaxpapers: JAX-first, purely functional implementations of ICML 2026 papers.

Capabilities live in subpackages (``jaxpapers.linear_nets``, ...); shared machinery in
``jaxpapers.core``. Importing this package does not import any capability, so
``import jaxpapers`` stays cheap and never touches jax configuration.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
