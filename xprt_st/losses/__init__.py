"""xPRT's loss terms (one class per term, each usable alone), the composite XPRTLoss, and RetroMAE."""

from __future__ import annotations

from xprt_st.losses.cross_passage import CrossPassageLoss
from xprt_st.losses.retention import RetentionLoss, WithRetention
from xprt_st.losses.uniformity import UniformityLoss

__all__ = ["CrossPassageLoss", "RetentionLoss", "UniformityLoss", "WithRetention"]
