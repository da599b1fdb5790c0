"""``feedline.image``: tf.image and tf.io image operations on NumPy arrays, one image or a batch."""
