"""A KerasHub model as the model the user brings (`--model keras_hub:PRESET_OR_DIR`), built in the worker.

tpulab measures speed, not accuracy, and reaches no hub at run time: the model is built from its config alone
(`from_preset(..., load_weights=False)`: random weights), from a local folder only. A preset name is looked up
here in kagglehub's cache (`KAGGLEHUB_CACHE`; Hugging Face's for `hf://`, with HF_HUB_OFFLINE set), and its
folder is what KerasHub is given: given the name, KerasHub asks Kaggle for each file the cache lacks (an optional
one such as task.json included), and kagglehub 1.0 has no offline switch.

What is built: the Task that the folder's task.json names when tpulab can make its targets (a CausalLM: the next
token; a classifier: class labels), as a plain functional model over the Task's layers, compiled with the
optimizer and loss KerasHub's `compile()` picks ("auto": Adam, SparseCategoricalCrossentropy), no metrics;
otherwise the Backbone that config.json names, compiled with Adam and mean squared error against zeros of its
outputs (a stated stand-in loss: the backbone's own work is what is timed). The inputs are synthetic, of full
static shapes: token ids below the vocabulary, an all-ones padding mask, zero segment ids, images of uniform
noise of the preprocessor's (else the backbone's, else 224) image size.

Import cost (2 cores, warm): `import keras_hub` takes 0.3 s beside Keras without TensorFlow (the JAX worker keeps
it out), and 1.9 s where it may import it, as it does when installed (TensorFlow and tensorflow-text, for its
preprocessing, which a model built with `preprocessor=None` never runs). KerasHub's floating-point presets take
Keras's global dtype policy (--precision) over their saved dtype.
"""

from __future__ import annotations

import json
import os
import weakref
from pathlib import Path
from typing import Any

import keras
import numpy as np

from tpulab.base.errors import TpulabError, did_you_mean, one_line

ROWS = 64  # two batches of 32: the caller slices its batches from them
IMAGE_SIZE = 224  # an image input's side when neither the preprocessor nor the backbone fixes it
PREFIX = "keras_hub:"
BUILT: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()  # model -> what was built, in words


def load(source: str, seq_len: int, rows: int = ROWS, seed: int = 0) -> tuple[Any, tuple[Any, Any]]:
    """(compiled keras model, (x, y)): the KerasHub model `source` names - a local preset folder (one with
    config.json, as `save_to_preset` writes) or a preset name found in the local cache - built from its config
    with random weights, compiled, with `rows` rows of synthetic inputs (token ids of length `seq_len`) and the
    targets its loss takes. Whatever KerasHub cannot build offline is a one-line TpulabError saying why."""
    label = PREFIX + source.removeprefix(PREFIX)
    hub = _keras_hub()
    folder, found = resolve(source.removeprefix(PREFIX), hub)
    try:
        model, task, what = build(folder, hub)
    except TpulabError:
        raise
    except Exception as e:  # noqa: BLE001 - KerasHub's own words on why it cannot build this config
        raise TpulabError(f"{label}: KerasHub cannot build it from {folder}: {one_line(e)}") from None
    backbone = getattr(task, "backbone", task)
    _check_length(backbone, hub, seq_len, label)
    rng = np.random.default_rng(seed)
    x = inputs(model, backbone, folder, seq_len, rows, rng, label)
    y = targets(model, task, x, rng)
    BUILT[model] = f"{label}: {what}, random weights, from {found}"
    return model, (x, y)


def _check_length(backbone: Any, hub: Any, seq_len: int, label: str) -> None:
    """Refuse a --seq-len past the positions a learned position embedding has (GPT-2's, BERT's): it would fail
    deep in the first step; rotary ones (Gemma's, Llama's) take any length."""
    layers = backbone._flatten_layers(include_self=False)  # every layer, nested ones too
    longest = min((layer.sequence_length for layer in layers if isinstance(layer, hub.layers.PositionEmbedding)),
                  default=None)
    if longest is not None and seq_len > longest:
        raise TpulabError(f"{label}: --seq-len {seq_len} is longer than the {longest} positions "
                          f"{type(backbone).__name__} has: pass --seq-len {longest} or less")


def build(folder: Path, hub: Any) -> tuple[Any, Any, str]:
    """(the compiled model, the KerasHub model it runs, what it is in words).

    A Task is handed on as a plain functional `keras.Model` over the same layers (the Task's own graph and
    weights), compiled with the optimizer and loss KerasHub's `compile()` picks for it ("auto"), no metrics:
    a KerasHub Task's `fit` and `predict` wrap their data in a grain or tf.data pipeline for its preprocessor
    (even with none), which takes neither tpulab's PyDataset nor runs without grain or TensorFlow.
    """
    task_cls = _task_class(folder, hub)
    if task_cls is not None:
        task = task_cls.from_preset(str(folder), load_weights=False, preprocessor=None)
        task.compile()  # KerasHub's own choice ("auto"): its optimizer and loss for this task
        model = keras.Model(inputs=task.input, outputs=task.output, name=task.name)
        model.compile(optimizer=task.optimizer, loss=task.loss)
        return model, task, f"{type(task).__name__} (task.json; loss and optimizer as KerasHub compiles it)"
    backbone = hub.models.Backbone.from_preset(str(folder), load_weights=False)
    backbone.compile(optimizer=keras.optimizers.Adam(), loss="mean_squared_error")
    return backbone, backbone, f"{type(backbone).__name__} (backbone; loss: mean squared error against zeros)"


def describe(model: Any) -> str | None:
    """What `load` built (class, task or backbone, the stand-in loss if any, where its config came from)."""
    return BUILT.get(model)


def _keras_hub() -> Any:
    """KerasHub, imported offline: Hugging Face's client told so before it loads (it reads the variable at
    import)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import keras_hub
    except ImportError as e:
        raise TpulabError(f"--model keras_hub: KerasHub is not installed here ({one_line(e)}): pip install "
                          "'tpulab[keras-hub]'") from None
    return keras_hub


def resolve(source: str, hub: Any) -> tuple[Path, str]:
    """The local folder that holds `source`'s config.json, and where it was found in words; a one-line
    TpulabError when there is none (tpulab downloads nothing)."""
    label = PREFIX + source
    given = Path(source).expanduser()
    if given.is_dir():
        if not (given / "config.json").is_file():
            raise TpulabError(f"{label}: {given} has no config.json: a KerasHub preset folder has one "
                              "(model.save_to_preset(folder) writes it)")
        return given, str(given)
    if source.startswith("hf://"):
        return _hugging_face(source)
    presets = hub.models.Backbone.presets  # every built-in preset, by name
    handle = presets[source]["kaggle_handle"] if source in presets else source
    if handle.startswith("kaggle://"):
        found = _kaggle_cached(handle.removeprefix("kaggle://"))
        if found is not None:
            return found, f"the Kaggle cache ({found})"
        if source in presets or source.startswith("kaggle://"):  # a preset (or a Kaggle handle) not downloaded here
            raise TpulabError(f"{label}: not in the local KerasHub/Kaggle cache (KAGGLEHUB_CACHE {_kaggle_root()}): "
                              "tpulab reaches no hub at run time; download it once where there is network (python "
                              f"-c \"import keras_hub; keras_hub.models.Backbone.from_preset('{source}', "
                              "load_weights=False)\" fetches its config alone) or pass a folder")
    raise TpulabError(f"{label}: not a folder, nor a KerasHub preset name in the local KerasHub/Kaggle cache "
                      f"(KAGGLEHUB_CACHE {_kaggle_root()}): pass a preset's folder (model.save_to_preset(folder) "
                      f"writes one) or a name keras_hub.models.Backbone.presets lists{did_you_mean(source, presets)}")


def _kaggle_root() -> Path:
    """kagglehub's cache folder, as kagglehub finds it (KAGGLEHUB_CACHE, else ~/.cache/kagglehub)."""
    return Path(os.environ.get("KAGGLEHUB_CACHE", Path.home() / ".cache" / "kagglehub"))


def _kaggle_cached(handle: str) -> Path | None:
    """The cached folder of Kaggle model `owner/model/framework/variation[/version]` that has a config.json (the
    version named, else the newest cached), laid out as kagglehub writes it."""
    parts = handle.strip("/").split("/")
    if len(parts) not in (4, 5):
        return None
    variation = _kaggle_root().joinpath("models", *parts[:4])
    versions = [parts[4]] if len(parts) == 5 else []
    if variation.is_dir():
        versions += sorted((p.name for p in variation.iterdir() if p.name.isdigit()), key=int, reverse=True)
    return next((variation / v for v in versions if (variation / v / "config.json").is_file()), None)


def _hugging_face(source: str) -> tuple[Path, str]:
    """The Hugging Face cache's snapshot folder of `hf://org/model` (its config.json), looked up offline."""
    import huggingface_hub

    repo = source.removeprefix("hf://")
    found = huggingface_hub.try_to_load_from_cache(repo, "config.json")
    if not isinstance(found, str):
        raise TpulabError(f"{PREFIX}{source}: not in the local Hugging Face cache (HF_HOME "
                          f"{huggingface_hub.constants.HF_HOME}): tpulab reaches no hub at run time; download it "
                          f"once where there is network (hf download {repo}) or pass a folder")
    folder = Path(found).parent
    return folder, f"the Hugging Face cache ({folder})"


def _task_class(folder: Path, hub: Any) -> Any:
    """The Task class the folder's task.json names, when tpulab can make its targets (a CausalLM or a
    classifier); None for a backbone alone, or a task whose targets tpulab does not know (its backbone runs)."""
    path = folder / "task.json"
    if not path.is_file():
        return None
    try:
        cls = keras.saving.get_registered_object(json.loads(path.read_text())["registered_name"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    known = (hub.models.CausalLM, hub.models.TextClassifier, hub.models.ImageClassifier)
    return cls if isinstance(cls, type) and issubclass(cls, known) else None


def inputs(model: Any, backbone: Any, folder: Path, seq_len: int, rows: int, rng: np.random.Generator,
           label: str) -> Any:
    """A batch for each of the model's inputs, in its own structure (a dict by name), every dimension fixed."""
    vocabulary = getattr(backbone, "vocabulary_size", None)
    side = _image_size(folder)

    def one(name: str, spec: Any) -> np.ndarray:
        shape = spec.shape[1:]
        if "int" in str(spec.dtype) or "bool" in str(spec.dtype):
            fixed = tuple(seq_len if d is None else d for d in shape)
            if "mask" in name:
                return np.ones((rows, *fixed), dtype=spec.dtype)
            if "segment" in name:
                return np.zeros((rows, *fixed), dtype=spec.dtype)
            if not isinstance(vocabulary, int):
                raise TpulabError(f"{label}: cannot tell the vocabulary of {type(backbone).__name__} for its "
                                  f"integer input {name!r}")
            return rng.integers(0, vocabulary, (rows, *fixed)).astype(spec.dtype)
        image = len(shape) == 3
        fixed = tuple((side if image and i < 2 else seq_len) if d is None else d for i, d in enumerate(shape))
        return rng.random((rows, *fixed), dtype=np.float32)

    given = model.input
    if isinstance(given, dict):
        return {k: one(k, v) for k, v in given.items()}
    return keras.tree.map_structure(lambda v: one(v.name, v), given)


def _image_size(folder: Path) -> int:
    """The image side the preset's preprocessor resizes to (its image converter's image_size), else the
    backbone's fixed image_shape, else IMAGE_SIZE."""
    for name, key in (("preprocessor.json", "image_size"), ("config.json", "image_shape")):
        try:
            found = _find(json.loads((folder / name).read_text()), key)
        except (OSError, ValueError):
            continue
        if isinstance(found, (list, tuple)) and found and isinstance(found[0], int):
            return found[0]
    return IMAGE_SIZE


def _find(config: Any, key: str) -> Any:
    """The first value of `key` anywhere in a nested Keras config."""
    if isinstance(config, dict):
        if key in config:
            return config[key]
        config = list(config.values())
    if isinstance(config, list):
        return next((v for v in (_find(c, key) for c in config) if v is not None), None)
    return None


def targets(model: Any, task: Any, x: Any, rng: np.random.Generator) -> Any:
    """What the compiled loss takes: the next token for a CausalLM, class labels for a classifier (`task`, the
    KerasHub model), zeros of each output's shape for a backbone (its mean squared error)."""
    rows = len(keras.tree.flatten(x)[0])
    if isinstance(x, dict) and "token_ids" in x and _is(task, "CausalLM"):
        return np.roll(x["token_ids"], -1, axis=1)
    classes = getattr(task, "num_classes", None)
    if isinstance(classes, int):
        return rng.integers(0, classes, (rows,)).astype("int32")
    specs = keras.tree.map_structure(lambda a: keras.KerasTensor(a.shape, dtype=str(a.dtype)), x)
    out = model.compute_output_spec(specs)
    return keras.tree.map_structure(lambda o: np.zeros(o.shape, dtype="float32"), out)


def _is(model: Any, base: str) -> bool:
    """Whether the model's class derives from the KerasHub class named `base` (named, so no import needed)."""
    return any(c.__name__ == base for c in type(model).__mro__)
