"""The one-layer Transformer decoder shared by xPRT's fill-in terms and RetroMAE's enhanced decoding."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer
from torch import Tensor, nn

from xprt_st.models import hidden_size, transformer_module, word_embeddings


class DecoderLayer(nn.Module):
    """One post-LayerNorm BERT-style layer whose queries may differ from its keys/values.

    ``x = LN(query + Attn(query, context, context)); out = LN(x + FFN(x))``. With ``context=None`` it is
    plain self-attention (xPRT's fill-in); with a separate context it is RetroMAE's two-stream layer.
    """

    def __init__(self, hidden: int, num_heads: int, intermediate: int, dropout: float, layer_norm_eps: float) -> None:
        super().__init__()
        if hidden % num_heads:
            raise ValueError(f"hidden size {hidden} is not divisible by {num_heads} attention heads")
        self.num_heads = num_heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=layer_norm_eps)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.feed_forward = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def _heads(self, states: Tensor) -> Tensor:
        rows, length, hidden = states.shape
        return states.view(rows, length, self.num_heads, hidden // self.num_heads).transpose(1, 2)

    def forward(self, query: Tensor, attention_mask: Tensor, context: Tensor | None = None) -> Tensor:
        """``query``: (rows, q_len, hidden); ``context``: (rows, k_len, hidden) or None (= query);
        ``attention_mask``: bool, True = may attend, either (rows, k_len) or (rows, q_len, k_len)."""
        context = query if context is None else context
        mask = attention_mask.bool()
        mask = mask[:, None, None, :] if mask.dim() == 2 else mask[:, None]  # (rows, 1, q_len|1, k_len)
        attended = F.scaled_dot_product_attention(
            self._heads(self.query(query)),
            self._heads(self.key(context)),
            self._heads(self.value(context)),
            attn_mask=mask,
            dropout_p=self.dropout.p if self.training else 0.0,
        )  # (rows, heads, q_len, head_dim)
        attended = attended.transpose(1, 2).reshape(query.shape)  # (rows, q_len, hidden)
        states = self.attention_norm(query + self.dropout(self.output(attended)))
        return self.output_norm(states + self.dropout(self.feed_forward(F.gelu(self.intermediate(states)))))


class FillInDecoder(nn.Module):
    """A one-layer decoder that reads the encoder's token and position embeddings (shared, not copied).

    ``embed(input_ids)`` is ``LN(E[x_i] + P[i])`` with the encoder's token table ``E`` and position
    table ``P`` and the decoder's own LayerNorm. ``fill_in(...)`` inserts ``num_condition_vectors``
    vectors, a linear map of one sentence vector, right after [CLS] and runs the layer; the
    conditioning vectors carry no position embedding (they are told apart by their own projection).

    ``E`` and ``P`` are referenced, not registered: the decoder's ``state_dict`` holds only its own
    weights (layer, LayerNorm, projection), so loss-owned checkpoints never duplicate the encoder.

    Args:
        model: the encoder whose embeddings are shared.
        num_condition_vectors: 4 in xPRT; 0 for RetroMAE, whose sentence vector enters as is.
        num_heads: attention heads; default the encoder's.
        intermediate_size: feed-forward width; default the encoder's.
        dropout: 0.1, BERT's.
    """

    def __init__(
        self,
        model: SentenceTransformer,
        num_condition_vectors: int = 4,
        num_heads: int | None = None,
        intermediate_size: int | None = None,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        config = transformer_module(model).auto_model.config
        hidden = hidden_size(model)
        eps = float(getattr(config, "layer_norm_eps", 1e-12))
        self.num_condition_vectors = num_condition_vectors
        self.embedding_norm = nn.LayerNorm(hidden, eps=eps)
        self.condition = nn.Linear(hidden, num_condition_vectors * hidden) if num_condition_vectors > 0 else None
        self.layer = DecoderLayer(
            hidden,
            num_heads or int(config.num_attention_heads),
            intermediate_size or int(getattr(config, "intermediate_size", 4 * hidden)),
            dropout,
            eps,
        )
        object.__setattr__(self, "_word_embeddings", word_embeddings(model))
        encoder_embeddings = getattr(transformer_module(model).auto_model, "embeddings", None)
        positions = getattr(encoder_embeddings, "position_embeddings", None)
        if isinstance(positions, nn.Embedding):
            object.__setattr__(self, "_position_embeddings", positions)
        else:  # e.g. rotary encoders: the decoder learns its own absolute positions
            self.own_position_embeddings = nn.Embedding(int(getattr(config, "max_position_embeddings", 512)), hidden)
            object.__setattr__(self, "_position_embeddings", self.own_position_embeddings)

    def positions(self, length: int, device: torch.device) -> Tensor:
        """(length, hidden) position embeddings of indices 0..length-1."""
        return self._position_embeddings(torch.arange(length, device=device))

    def embed(self, input_ids: Tensor) -> Tensor:
        """(rows, seq) ids -> (rows, seq, hidden) ``LN(token + position)``."""
        positions = self.positions(input_ids.size(1), input_ids.device)  # (seq, hidden)
        return self.embedding_norm(self._word_embeddings(input_ids) + positions)

    def fill_in(self, input_ids: Tensor, attention_mask: Tensor, vectors: Tensor) -> Tensor:
        """Decode (already masked) ``input_ids`` conditioned on ``vectors``; states aligned with ``input_ids``.

        ``input_ids``/``attention_mask``: (rows, seq); ``vectors``: (rows, hidden). Returns (rows, seq, hidden).
        """
        if self.condition is None:
            raise ValueError("fill_in needs num_condition_vectors > 0")
        rows = input_ids.size(0)
        tokens = self.embed(input_ids)  # (rows, seq, hidden)
        condition = self.condition(vectors).view(rows, self.num_condition_vectors, -1)  # (rows, k, hidden)
        sequence = torch.cat([tokens[:, :1], condition, tokens[:, 1:]], dim=1)  # (rows, seq + k, hidden)
        ones = attention_mask.new_ones(rows, self.num_condition_vectors)
        mask = torch.cat([attention_mask[:, :1], ones, attention_mask[:, 1:]], dim=1)  # (rows, seq + k)
        states = self.layer(sequence, mask)  # (rows, seq + k, hidden)
        return torch.cat([states[:, :1], states[:, 1 + self.num_condition_vectors :]], dim=1)  # (rows, seq, hidden)
