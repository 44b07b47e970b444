"""The IDX reader on files the tests write, the search order, and the messages when data is missing."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from tpulab.workloads.data import DEBIAN_DIR, FILES, DataError, find, load, load_dir, read_idx, synthetic

from .helpers import write_idx, write_set


def test_reads_what_was_written(tmp_path):
    arrays = write_set(tmp_path)
    ds = load_dir(tmp_path, "test")
    for key, array in arrays.items():
        np.testing.assert_array_equal(getattr(ds, key), array)
    assert ds.x_train.dtype == np.uint8 and ds.x_train.shape == (12, 28, 28) and not ds.synthetic


def test_truncated_file_is_named(tmp_path):
    path = tmp_path / "t.gz"
    write_idx(path, np.zeros((3, 28, 28)), truncate=10)
    with pytest.raises(DataError, match=r"t\.gz: truncated or padded: the header promises 2352 values, the file holds 2342"):
        read_idx(path)


def test_corrupt_gzip_and_bad_magic_are_named(tmp_path):
    bad = tmp_path / "bad.gz"
    bad.write_bytes(b"this is not gzip")
    with pytest.raises(DataError, match=r"bad\.gz: not a readable gzip file"):
        read_idx(bad)
    magic = tmp_path / "magic.gz"
    with gzip.open(magic, "wb") as f:
        f.write(b"\x12\x34\x08\x01" + b"\x00" * 8)
    with pytest.raises(DataError, match=r"magic\.gz: not an IDX file"):
        read_idx(magic)


def test_mismatched_counts_are_reported(tmp_path):
    write_set(tmp_path)
    write_idx(tmp_path / FILES["y_train"], np.zeros(7))
    with pytest.raises(DataError, match="do not match 7 labels"):
        load_dir(tmp_path, "test")


def test_search_order(tmp_path):
    given, env_dir, keras_home, debian = (tmp_path / n for n in ("given", "env", "keras", "debian"))
    for d in (given, env_dir, keras_home / "datasets/fashion-mnist", debian):
        write_set(d)
    env = {"TPULAB_DATA_DIR": str(env_dir), "KERAS_HOME": str(keras_home)}
    assert find(str(given), env, debian) == (given, "--data-dir")
    assert find(None, env, debian) == (env_dir, "$TPULAB_DATA_DIR")
    assert find(None, {"KERAS_HOME": str(keras_home)}, debian) == (keras_home / "datasets/fashion-mnist", "Keras cache")
    assert find(None, {"KERAS_HOME": str(tmp_path / "none")}, debian)[1] == "Debian package dataset-fashion-mnist"


def test_a_folder_the_user_named_never_falls_through(tmp_path):
    keras_home = tmp_path / "keras"
    write_set(keras_home / "datasets/fashion-mnist")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"--data-dir .*empty lacks train-images-idx3-ubyte\.gz"):
        find(str(tmp_path / "empty"), {"KERAS_HOME": str(keras_home)}, tmp_path / "nodebian")
    with pytest.raises(DataError, match=r"\$TPULAB_DATA_DIR .*empty lacks"):
        find(None, {"TPULAB_DATA_DIR": str(tmp_path / "empty"), "KERAS_HOME": str(keras_home)}, tmp_path / "x")


def test_nothing_found_lists_every_way_out(tmp_path):
    with pytest.raises(DataError) as e:
        find(None, {"KERAS_HOME": str(tmp_path)}, tmp_path / "nodebian")
    msg = str(e.value)
    for option in ("--data-dir", "$TPULAB_DATA_DIR", "apt-get install dataset-fashion-mnist", "--download",
                   "--dataset synthetic"):
        assert option in msg
    assert "\n" not in msg


def test_synthetic_is_labelled():
    ds = synthetic(train=100, test=10)
    assert ds.synthetic and ds.source == "synthetic" and ds.x_train.shape == (100, 28, 28)
    assert load("synthetic").synthetic


@pytest.mark.skipif(not (DEBIAN_DIR / FILES["x_train"]).exists(),
                    reason="needs Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist)")
def test_debian_package_gives_the_real_data():
    ds = load("fashion-mnist", environ={"KERAS_HOME": "/nonexistent"})
    assert ds.x_train.shape == (60000, 28, 28) and ds.x_test.shape == (10000, 28, 28)
    assert sorted(set(ds.y_train.tolist())) == list(range(10)) and "dataset-fashion-mnist" in ds.source
