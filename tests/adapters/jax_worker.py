"""Scenarios for test_jax.py, run in a subprocess with 8 (or 4 per process) host devices.

``python jax_worker.py single`` or ``python jax_worker.py multi <process_id> <port>``;
prints one JSON line of findings.
"""

import collections
import json
import sys

import jax
import numpy as np

Pair = collections.namedtuple("Pair", "a b")


def single() -> dict:
    import feedline as fl
    import feedline.jax as flj
    from feedline.testing.threads import feedline_threads

    found = {"devices": jax.device_count()}
    ds = fl.Dataset.range(64).map(lambda x: {"x": np.full(3, x, np.float32),
                                             "pair": Pair(x, -x),
                                             "name": str(int(x)).encode()}).batch(16)
    loader = flj.Loader(ds, prefetch_to_device=3)
    batches = list(loader)
    first = batches[0]
    found["shape"] = list(first["x"].shape)
    found["sharded_over"] = len(first["x"].sharding.device_set)
    # Each device holds 2 consecutive rows of the 16.
    found["shards"] = sorted(
        [int(s.index[0].start), np.asarray(s.data)[:, 0].tolist()]
        for s in first["x"].addressable_shards)
    found["pair_type"] = type(first["pair"]).__name__
    found["pair_a"] = np.asarray(first["pair"].a).tolist()
    found["names"] = [bytes(n).decode() for n in first["name"][:3]]
    found["epoch_rows"] = [int(v) for b in batches for v in np.asarray(b["pair"].a)]

    # Resume exactly with transfers in flight.
    it = iter(loader)
    head = [np.asarray(next(it)["pair"].a).tolist() for _ in range(2)]
    state = json.loads(json.dumps(loader.state_dict()))
    rest = [np.asarray(b["pair"].a).tolist() for b in it]
    again = flj.Loader(ds)
    again.load_state_dict(state)
    found["resumed"] = [np.asarray(b["pair"].a).tolist() for b in again] == rest
    found["head"] = head

    # A jitted step on the sharded batches.
    w = jax.numpy.zeros(3)

    @jax.jit
    def step(w, x):
        target = x[:, 0] * 2.0

        def loss(w):
            return ((x @ w - target) ** 2).mean()

        value, grad = jax.value_and_grad(loss)(w)
        return w - 1e-4 * grad, value

    losses = []
    for _ in range(3):
        for batch in loader:
            w, value = step(w, batch["x"])  # bytes leaves stay NumPy, outside jit
            losses.append(float(value))
    found["loss_first_last"] = [losses[0], losses[-1]]

    try:
        list(flj.Loader(fl.Dataset.range(12).batch(6)))
    except ValueError as error:
        found["indivisible"] = str(error)
    loader.close()
    again.close()
    found["threads_left"] = [t.name for t in feedline_threads()]
    return found


def multi(process_id: int, port: str) -> dict:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=process_id)
    import jax.numpy as jnp

    import feedline as fl
    import feedline.jax as flj

    ctx = flj.input_context()
    ds = fl.Dataset.range(64).map(lambda x: np.float32(x)).batch(
        ctx.get_per_pipeline_batch_size(16))
    loader = flj.Loader(ds)
    total = jax.jit(jnp.sum)
    sums = [float(total(batch)) for batch in loader]
    return {"context": [ctx.num_input_pipelines, ctx.input_pipeline_id,
                        ctx.num_replicas_in_sync],
            "local_devices": jax.local_device_count(), "sums": sums,
            "global_shape": list(next(iter(loader)).shape)}


if __name__ == "__main__":
    if sys.argv[1] == "single":
        print(json.dumps(single()))
    else:
        print(json.dumps(multi(int(sys.argv[2]), sys.argv[3])))
