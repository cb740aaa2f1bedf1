"""Worker for test_trainer_distributed.py, launched as ``torchrun --nproc_per_node 2 ddp_worker.py ...``.

Each rank builds the tiny model and a loss that owns a projection, initialised DIFFERENTLY per rank, and
trains two steps under DDP (gloo, CPU). Rank 0 then writes what the test checks to ``result.json``:
whether the projection and the encoder are identical on both ranks, and whether the cross-passage loss
masks same-document negatives across ranks (equal to the single-process loss on the whole batch).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from datasets import load_from_disk
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Transformer
from sentence_transformers.sentence_transformer.modules import Pooling
from torch import Tensor, nn
from training_helpers import cpu_training_args

from xprt_st.losses.cross_passage import cross_passage_loss
from xprt_st.training import XPRTTrainer


class ProjectedCrossPassageLoss(nn.Module):
    """L_xp on projected anchors; the projection is loss-owned, negatives are gathered across ranks."""

    def __init__(self, model: SentenceTransformer) -> None:
        super().__init__()
        self.model = model
        dim = model.get_embedding_dimension()
        self.projection = nn.Linear(dim, dim)

    def forward(self, sentence_features: list[dict[str, Tensor]], labels: Tensor) -> dict[str, Tensor]:
        anchors = self.projection(self.model(sentence_features[0])["sentence_embedding"])
        positives = self.model(sentence_features[1])["sentence_embedding"]
        return {"xp": cross_passage_loss(anchors, positives, labels, 0.05, gather_across_devices_=True)}


def gathered(tensor: Tensor) -> list[Tensor]:
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return parts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--output", required=True)
    options = parser.parse_args()

    model = SentenceTransformer(
        modules=[Transformer(options.model, max_seq_length=32), Pooling(32, "mean")], device="cpu"
    )
    args = cpu_training_args(Path(options.output), max_steps=2, seed=3)
    rank = dist.get_rank()
    torch.manual_seed(100 + rank)  # the projection starts different on each rank: the trainer must broadcast it
    loss = ProjectedCrossPassageLoss(model)
    data = load_from_disk(options.data).select_columns(["anchor", "positive", "label"])
    trainer = XPRTTrainer(model=model, args=args, train_dataset=data, loss=loss, starting_model=options.model)
    trainer.train()
    trainer.save_model(options.output)

    projection = torch.cat([p.detach().reshape(-1) for p in loss.projection.parameters()])
    encoder = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    projections, encoders = gathered(projection), gathered(encoder)

    # Global same-document masking: rank 0 holds documents [0, 1], rank 1 holds [0, 2].
    generator = torch.Generator().manual_seed(0)
    anchors_all = torch.randn(4, 8, generator=generator)
    positives_all = torch.randn(4, 8, generator=generator)
    labels_all = torch.tensor([0, 1, 0, 2])
    local = slice(2 * rank, 2 * rank + 2)
    distributed_value = cross_passage_loss(
        anchors_all[local], positives_all[local], labels_all[local], 0.05, gather_across_devices_=True
    )
    distributed_values = gathered(distributed_value.detach().reshape(1))
    whole_batch = cross_passage_loss(anchors_all, positives_all, labels_all, 0.05)
    unmasked = cross_passage_loss(anchors_all, positives_all, None, 0.05)

    if rank == 0:
        result = {
            "world_size": dist.get_world_size(),
            "backend": dist.get_backend(),
            "projection_max_diff": float((projections[0] - projections[1]).abs().max()),
            "encoder_max_diff": float((encoders[0] - encoders[1]).abs().max()),
            "projection_changed": bool(trainer.state.global_step == 2),
            "distributed_loss": float(torch.cat(distributed_values).mean()),
            "whole_batch_loss": float(whole_batch),
            "unmasked_loss": float(unmasked),
            "saved": sorted(path.name for path in Path(options.output).iterdir()),
        }
        Path(options.output, "result.json").write_text(json.dumps(result, indent=2))
    # No destroy_process_group() here, as in many user scripts: XPRTTrainer releases the group at exit.


if __name__ == "__main__":
    sys.exit(main())
