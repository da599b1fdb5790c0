"""Cases where feedline differs from TensorFlow: ``"<module>::<case>" -> reason``.

Each is ``xfail(strict=True)`` in test_tf_conformance.py and listed in DEVIATIONS.md; the
owners of feedline fix them, then the entry goes.
"""

DEVIATIONS: dict[str, str] = {
}
