"""xprt-st: cross-passage retrieval pre-training (xPRT) and RetroMAE for sentence-transformers."""

from __future__ import annotations

__version__ = "0.1.0"
