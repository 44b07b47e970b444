"""Fashion-MNIST from local files (IDX, gzip), or a synthetic stand-in that says so.

Search order: --data-dir, $TPULAB_DATA_DIR, the Keras cache ($KERAS_HOME or ~/.keras, under
datasets/fashion-mnist), Debian's dataset-fashion-mnist package. A directory the user named
that lacks the files is an error, never a silent fall-through to another source.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from tpulab.base.errors import TpulabError

if TYPE_CHECKING:  # numpy loads when data is read, not when the CLI starts
    import numpy as np

FILES = {
    "x_train": "train-images-idx3-ubyte.gz",
    "y_train": "train-labels-idx1-ubyte.gz",
    "x_test": "t10k-images-idx3-ubyte.gz",
    "y_test": "t10k-labels-idx1-ubyte.gz",
}
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
IDX_TYPES = {0x08: "uint8"}


class DataError(TpulabError):
    """Data missing or unreadable; the message names the file or folder and the way out."""


@dataclass(frozen=True)
class Dataset:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    source: str  # where it came from, or "synthetic"

    @property
    def synthetic(self) -> bool:
        return self.source == "synthetic"


def keras_cache_dir(environ: Mapping[str, str]) -> Path:
    home = environ.get("KERAS_HOME") or str(Path(environ.get("HOME", "~")).expanduser() / ".keras")
    return Path(home) / "datasets" / "fashion-mnist"


def _missing(directory: Path) -> list[str]:
    return [name for name in FILES.values() if not (directory / name).is_file()]


def find(data_dir: str | None = None, environ: Mapping[str, str] | None = None,
         debian_dir: Path = DEBIAN_DIR) -> tuple[Path, str]:
    """The folder holding the four files, and where it was found."""
    env = os.environ if environ is None else environ
    for value, origin in ((data_dir, "--data-dir"), (env.get("TPULAB_DATA_DIR"), "$TPULAB_DATA_DIR")):
        if value:
            missing = _missing(Path(value))
            if missing:
                raise DataError(f"{origin} {value} lacks {', '.join(missing)}: point it at a folder with the four "
                                "Fashion-MNIST .gz files, or leave it unset to search the usual places")
            return Path(value), origin
    for directory, origin in ((keras_cache_dir(env), "Keras cache"),
                              (debian_dir, "Debian package dataset-fashion-mnist")):
        if not _missing(directory):
            return directory, origin
    raise DataError(
        "Fashion-MNIST not found. Use one of: --data-dir DIR (or $TPULAB_DATA_DIR) with the four .gz files; "
        f"`apt-get install dataset-fashion-mnist` (gives {debian_dir}); --download (Keras fetches it into "
        f"{keras_cache_dir(env)}); or --dataset synthetic (random data, accuracy meaningless)")


def read_idx(path: Path) -> np.ndarray:
    """Read one gzip'd IDX file: magic (0, 0, type, ndim), big-endian uint32 dims, then the data."""
    import numpy as np

    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path}: not a readable gzip file ({e}); delete it or fetch it again") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in IDX_TYPES:
        raise DataError(f"{path}: not an IDX file (bad magic number); delete it or fetch it again")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header; delete it or fetch it again")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    expected = int(np.prod(dims))
    if len(raw) - header != expected:
        raise DataError(f"{path}: truncated or padded: the header promises {expected} values, "
                        f"the file holds {len(raw) - header}; delete it or fetch it again")
    return np.frombuffer(raw, dtype=IDX_TYPES[raw[2]], offset=header).reshape(dims)


def load_dir(directory: Path, origin: str) -> Dataset:
    arrays = {key: read_idx(directory / name) for key, name in FILES.items()}
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise DataError(f"{directory / FILES['x_' + split]}: {len(x)} images of shape {x.shape[1:]} do not "
                            f"match {len(y)} labels; the folder mixes files from different data sets")
    return Dataset(**arrays, source=f"{origin}: {directory}")


def synthetic(seed: int = 0, train: int = 60000, test: int = 10000) -> Dataset:
    """Random images and labels with the real shapes: for timing only, accuracy is meaningless."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return Dataset(rng.integers(0, 256, (train, 28, 28), dtype=np.uint8), rng.integers(0, 10, train, dtype=np.uint8),
                   rng.integers(0, 256, (test, 28, 28), dtype=np.uint8), rng.integers(0, 10, test, dtype=np.uint8),
                   source="synthetic")


def load(dataset: str, data_dir: str | None = None, download: bool = False,
         environ: Mapping[str, str] | None = None) -> Dataset:
    if dataset == "synthetic":
        return synthetic()
    env = os.environ if environ is None else environ
    try:
        return load_dir(*find(data_dir, env))
    except DataError:
        if not download or data_dir or env.get("TPULAB_DATA_DIR"):
            raise
    import keras  # only when the user asked for a download

    keras.datasets.fashion_mnist.load_data()
    return load_dir(keras_cache_dir(env), "Keras download")
