"""xPRT's loss terms (one class per term, each usable alone), the composite XPRTLoss, and RetroMAE.

Every loss keeps the SentenceTransformer at ``model`` and a frozen teacher, if any, at ``teacher``; every
other registered submodule (decoder, MLM head) is loss-owned, saved with checkpoints and not exported.
"""

from __future__ import annotations

from xprt_st.losses.cross_passage import CrossPassageLoss
from xprt_st.losses.decoder import FillInDecoder
from xprt_st.losses.fill_in import CrossFillInLoss, SelfFillInLoss
from xprt_st.losses.hybrid_teacher import HybridTeacherLoss
from xprt_st.losses.mlm import MLMLoss
from xprt_st.losses.retention import RetentionLoss, WithRetention
from xprt_st.losses.retromae import RetroMAELoss, sample_enhanced_decoding_mask
from xprt_st.losses.uniformity import UniformityLoss
from xprt_st.losses.xprt import XPRTLoss

__all__ = [
    "CrossFillInLoss",
    "CrossPassageLoss",
    "FillInDecoder",
    "HybridTeacherLoss",
    "MLMLoss",
    "RetentionLoss",
    "RetroMAELoss",
    "SelfFillInLoss",
    "UniformityLoss",
    "WithRetention",
    "XPRTLoss",
    "sample_enhanced_decoding_mask",
]
