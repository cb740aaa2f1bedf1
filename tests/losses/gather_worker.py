"""Worker for test_loss_gather.py, launched as ``torchrun --nproc_per_node 2 gather_worker.py OUTPUT``.

Each rank holds 3 of 6 groups; document 0 has a group on each rank. Rank 0 writes what it measured.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from xprt_st.losses.cross_passage import cross_passage_loss


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(0)  # the same whole batch on every rank
    anchors_all = torch.randn(6, 8, generator=generator)
    positives_all = torch.randn(6, 8, generator=generator)
    labels_all = torch.tensor([0, 1, 2, 0, 3, 4])  # groups 0 (rank 0) and 3 (rank 1): the same document

    local = slice(3 * rank, 3 * rank + 3)
    anchors = anchors_all[local].clone().requires_grad_(True)
    positives = positives_all[local].clone().requires_grad_(True)
    loss = cross_passage_loss(anchors, positives, labels_all[local], 0.05, gather_across_devices_=True)
    loss.backward()

    whole_anchors = anchors_all.clone().requires_grad_(True)
    whole_positives = positives_all.clone().requires_grad_(True)
    whole = cross_passage_loss(whole_anchors, whole_positives, labels_all, 0.05)
    whole.backward()

    losses = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(losses, loss.detach().reshape(1))
    # torch.distributed.nn.all_gather sums the ranks' gradients into each rank's rows: rank-local gradient =
    # world x the whole-batch gradient of the mean loss, which DDP's gradient averaging turns back into 1x.
    anchor_error = (anchors.grad - world * whole_anchors.grad[local]).abs().max().item()
    positive_error = (positives.grad - world * whole_positives.grad[local]).abs().max().item()
    errors = torch.tensor([anchor_error, positive_error])
    dist.all_reduce(errors, op=dist.ReduceOp.MAX)
    if rank == 0:
        result = {
            "mean_rank_loss": float(torch.cat(losses).mean()),
            "whole_batch_loss": float(whole),
            "max_gradient_error": float(errors.max()),
            "gradient_scale": float(whole_anchors.grad.abs().max()),
        }
        with open(sys.argv[1], "w", encoding="utf-8") as handle:
            json.dump(result, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
