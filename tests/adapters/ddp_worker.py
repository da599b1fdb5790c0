"""One rank of the multi-process tests in test_torch.py (run by torch.distributed.run).

Writes what this rank saw to ``<out>/<rank>.json``.
"""

import json
import sys

import numpy as np
import torch
import torch.distributed as dist

import feedline as fl
import feedline.torch as flt


def ints(batch):
    return [int(v) for v in batch.reshape(-1).tolist()]


def main(scenario: str, out: str) -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    report = {"rank": rank, "world": dist.get_world_size()}
    if scenario == "disjoint":
        # 103 elements: by index every rank gets 103 // world elements per epoch.
        loader = flt.Loader(fl.Dataset.range(103).global_shuffle(seed=7).batch(5))
        report["epochs"] = [[ints(b) for b in loader] for _ in range(2)]
        report["even_steps"] = loader.even_steps
    elif scenario == "uneven":
        # A filter after the shard: rank 0 (elements 0, 4, 8, ...) keeps 5 of its 25.
        ds = (fl.Dataset.range(100).filter(lambda x: x % 4 != 0 or x < 20)
              .map(lambda x: np.full(2, x)).batch(4))
        loader = flt.Loader(ds, policy=fl.AutoShardPolicy.DATA)
        report["epochs"] = [[ints(b) for b in loader] for _ in range(2)]
        report["dropped"] = loader.dropped
        report["even_steps"] = loader.even_steps
    elif scenario == "resume":
        ds = fl.Dataset.range(200).global_shuffle(seed=3).batch(4)
        loader = flt.Loader(ds)
        it = iter(loader)
        head = [ints(next(it)) for _ in range(5)]
        state = json.loads(json.dumps(loader.state_dict()))
        rest = [ints(b) for b in it]
        restored = flt.Loader(ds)
        restored.load_state_dict(state)
        report["head"], report["rest"] = head, rest
        report["restored"] = [ints(b) for b in restored]
    with open(f"{out}/{rank}.json", "w") as file:
        json.dump(report, file)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
