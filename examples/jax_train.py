"""Training a JAX model on batches sharded over every device, fed by feedline.

On one CPU, pretend to have 8 devices:

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python examples/jax_train.py

On several hosts, call ``jax.distributed.initialize()`` first: each process then reads its
own share and feeds its local devices; the step sees the global batch.
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

import feedline as fl
import feedline.jax as flj

GLOBAL_BATCH = 64


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--report", help="write the figures here (JSON)")
    args = parser.parse_args()

    x = np.random.default_rng(0).normal(size=(2048, 4)).astype(np.float32)
    w_true = np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32)
    y = x @ w_true + 0.25
    context = flj.input_context()
    per_process = context.get_per_pipeline_batch_size(GLOBAL_BATCH)
    dataset = (fl.Dataset.from_tensor_slices({"x": x, "y": y})
               .global_shuffle(seed=0)
               .batch(per_process, drop_remainder=True))
    loader = flj.Loader(dataset)  # global arrays, batch dimension over all devices

    @jax.jit
    def step(params, batch):
        def loss_fn(p):
            return jnp.mean((batch["x"] @ p["w"] + p["b"] - batch["y"]) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss

    params = {"w": jnp.zeros(4), "b": jnp.zeros(())}
    losses, shardings = [], set()
    for _ in range(args.epochs):
        for batch in loader:
            shardings.add(len(batch["x"].sharding.device_set))
            params, loss = step(params, batch)
            losses.append(float(loss))
    if args.report:
        with open(args.report, "w") as out:
            json.dump({"devices": jax.device_count(), "sharded_over": sorted(shardings),
                       "steps": len(losses), "losses": losses,
                       "w": np.asarray(params["w"]).tolist(), "b": float(params["b"]),
                       "state": loader.state_dict()["epoch"]}, out)
    loader.close()


if __name__ == "__main__":
    main()
