"""Port of tensorflow/python/data/kernel_tests/random_test.py.

The numbers are TF's generator's; the cases record what TF's tests assert about them:
whether two runs or two epochs agree.
"""

from __future__ import annotations

from tfcases.harness import Suite, restored_matches_count, values

SUITE = Suite("random_test.py")
add = SUITE.add

for seed in (None, 20):
    # TF compares a run with one of the dataset's graph round trip; the port builds it twice.
    add(f"testDeterminism[global_seed=None,local_seed={seed}]",
        lambda ns, s=seed: values(ns, ns.Dataset.random(seed=s).take(10)) == values(
            ns, ns.Dataset.random(seed=s).take(10)), mode="value")
for rerandomize in (None, True, False):
    tag = f"[rerandomize={rerandomize}]"
    add("testRerandomizeEachIterationEpochs" + tag, lambda ns, r=rerandomize: (
        lambda ds: values(ns, ds) == values(ns, ds))(ns.Dataset.random(
            seed=42, rerandomize_each_iteration=r, name="random").take(10)), mode="value")
    add("testRerandomizeRepeatEpochs" + tag, lambda ns, r=rerandomize: (
        lambda out: out[:10] == out[10:])(values(ns, ns.Dataset.random(
            seed=42, rerandomize_each_iteration=r, name="random").take(10).repeat(2))),
        mode="value")
add("testName", lambda ns: ns.Dataset.random(seed=42, name="random").take(1)
    .map(lambda _: ns.constant(42, "int32")))
for rerandomize in (True, False):
    SUITE.checkpoint(f"RandomCheckpointTest.test[rerandomize_each_iteration={rerandomize}]",
                     lambda ns, r=rerandomize: ns.Dataset.random(
                         seed=55, rerandomize_each_iteration=r).take(10),
                     derive=restored_matches_count)

SUITE.skip("testDeterminism[global_seed=10]", "tf.random.set_seed graph-level seeds")
SUITE.skip("testRerandomizeEachIterationIgnored", "TF1 only")
SUITE.skip("testRerandomizeInsideFunction", "dataset built inside a tf.function")
