"""``fl.datasets.load`` given a folder of images per class says what reads it (issue 43).

Was: "'…/flowers' holds several configs and no default (…metadata.json is missing); name one
of none as 'flowers/<config>'" for ``load("flowers", data_dir=…)``, and "dataset name … is
not 'name', …" for ``load("/…/flowers")``: a porting user with a Keras
``image_dataset_from_directory`` folder learned nothing. TFDS itself has no loader for such
a folder by name (its ``ImageFolder`` builder is a separate class), so feedline points to
its own ``fl.datasets.image_folder``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from PIL import Image

from feedline.datasets import DatasetNotFoundError, load


@pytest.fixture
def flowers(tmp_path):
    """``tmp_path/flowers/{daisy,roses}/0.JPG``: two classes, one image each."""
    for label in ("daisy", "roses"):
        os.makedirs(tmp_path / "flowers" / label)
        Image.fromarray(np.zeros((2, 2, 3), np.uint8)).save(
            tmp_path / "flowers" / label / "0.JPG", format="JPEG")
    return tmp_path / "flowers"


def test_a_name_whose_folder_holds_images_per_class(flowers):
    with pytest.raises(DatasetNotFoundError) as caught:
        load("flowers", split="train", data_dir=flowers.parent)
    assert str(caught.value) == (
        f"{str(flowers)!r} is a folder of images per class, not a prepared TFDS dataset; "
        f"read it with fl.datasets.image_folder({str(flowers)!r})")


@pytest.mark.parametrize("relative", [False, True])
def test_a_path_to_a_folder_of_images_per_class(flowers, monkeypatch, relative):
    path = str(flowers)
    if relative:  # "data/flowers" also reads as 'name/config'
        monkeypatch.chdir(flowers.parent.parent)
        path = os.path.join(flowers.parent.name, "flowers")
    with pytest.raises(ValueError) as caught:
        load(path, split="train")
    assert str(caught.value) == (
        f"{path!r} is a folder of images per class; read it with "
        f"fl.datasets.image_folder({path!r}) (load() takes a prepared TFDS dataset's name, "
        "with data_dir=)")


def test_other_folders_keep_their_errors(tmp_path):
    os.makedirs(tmp_path / "notes" / "a")
    (tmp_path / "notes" / "a" / "readme.txt").write_text("no images")
    with pytest.raises(DatasetNotFoundError, match=r"holds several configs .* name one of "
                                                   r"none as 'notes/<config>'"):
        load("notes", split="train", data_dir=tmp_path)
    with pytest.raises(ValueError, match=r"is not 'name', 'name/config'"):
        load(str(tmp_path / "notes"), split="train")
