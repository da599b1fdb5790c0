"""Data-parallel training with PyTorch DDP, fed by feedline (CPU and gloo here; NCCL on GPUs).

Run with two processes:

    python -m torch.distributed.run --nproc_per_node=2 examples/ddp_train.py

Each rank reads its own share of one global shuffle (by index: equal shares, every element
once per epoch), gets tensors without copies, and the checkpoint holds the data position.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch
import torch.distributed as dist

import feedline as fl
import feedline.torch as flt

GLOBAL_BATCH = 64


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--report", help="write each rank's figures here (JSON; {rank} in the name)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)

    # y = 3x - 1 with a little noise: 4,096 examples, the same on every rank.
    x = np.random.default_rng(0).normal(size=(4096, 1)).astype(np.float32)
    y = 3 * x - 1 + np.random.default_rng(1).normal(scale=0.01, size=x.shape).astype(np.float32)
    context = flt.input_context()
    per_replica = context.get_per_replica_batch_size(GLOBAL_BATCH)
    dataset = (fl.Dataset.from_tensor_slices((x, y))
               .global_shuffle(seed=42)
               .batch(per_replica, drop_remainder=True))
    loader = flt.Loader(dataset)  # this rank's share, by index

    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(args.epochs):
        for inputs, targets in loader:
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())

    checkpoint = {"model": model.state_dict(), "data": loader.state_dict()}
    if args.report:
        with open(args.report.format(rank=dist.get_rank()), "w") as out:
            json.dump({"rank": dist.get_rank(), "steps": len(losses), "losses": losses,
                       "weight": model.module.weight.item(), "bias": model.module.bias.item(),
                       "epoch": checkpoint["data"]["epoch"]}, out)
    loader.close()
    # DDP's reducer holds the gloo process group: released after destroy_process_group,
    # at interpreter exit, gloo's threads can abort the process ("terminate called without
    # an active exception", seen once in CI). Release it first.
    del model, optimizer
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
