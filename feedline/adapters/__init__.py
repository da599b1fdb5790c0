"""Framework adapters: feeding PyTorch (:mod:`feedline.torch`) and JAX (:mod:`feedline.jax`)."""
