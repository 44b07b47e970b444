"""Where a model a library builds comes from (`hf:NAME_OR_DIR`, `timm:NAME`, `keras_hub:PRESET_OR_DIR`): the
libraries, a spec's folder or name, and the library's module inside a worker. Shared by the `model` workload and
decode (`--model hf:...`); no framework is imported here."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpulab.base.errors import TpulabError
from tpulab.workloads.base import ParamError


@dataclass(frozen=True)
class Library:
    """A library that builds models from a name or a folder: its module, the extra that installs it, the
    framework its models are, and what its name may be."""

    module: str
    extra: str
    models: str  # the module its models' classes come from: a backend's framework's, or Keras's (any backend)
    names: str  # what may follow the prefix, in words

    @property
    def framework(self) -> str:
        return self.models.split(".")[0]


LIBRARIES = {
    "hf": Library("transformers", "hf", "torch.nn", "a Hugging Face model's folder (its config.json) or a name in the "
                  "local Hugging Face cache"),
    "timm": Library("timm", "timm", "torch.nn", "a name timm.create_model knows (timm.list_models() lists them)"),
    "keras_hub": Library("keras_hub", "keras-hub", "keras", "a KerasHub preset's folder (its config.json) or a "
                         "preset name in the local cache"),
}


def folder_or_name(library: str, name: str, param: str) -> tuple[str, Path | None]:
    """A library's model by name or folder: (the folder, resolved, and its config.json) or (the name, None: the
    worker looks it up in the local cache, reaching no hub); `ParamError` on `param` where a folder has no
    config.json."""
    if not name:
        raise ParamError(param, f"--{param.replace('_', '-')} {library}: needs {LIBRARIES[library].names} after the "
                         "colon")
    folder = Path(name).expanduser()
    if library != "timm" and (folder.is_dir() or "/" in name or name.startswith((".", "~"))):
        if not (folder / "config.json").is_file():
            raise ParamError(param, f"--{param.replace('_', '-')} {library}:{name}: no config.json in {name} (a folder "
                             "needs its model's config.json)")
        return str(folder.resolve()), folder.resolve() / "config.json"
    return name, None


def hf_config(spec: str, param: str) -> tuple[str, dict[str, Any]]:
    """`hf:NAME_OR_DIR`'s source (a folder, resolved, or a name) and its config.json as read (JSON, no
    transformers): a folder's, or a name's in the local Hugging Face cache; `ParamError` on `param` otherwise."""
    flag = f"--{param.replace('_', '-')}"
    prefix, _, name = spec.strip().partition(":")
    if prefix != "hf":
        raise ParamError(param, f"{flag} must be hf:DIR or hf:NAME, a transformers model (got {spec!r})")
    name = name.strip()
    path = None if name.startswith(("/", ".", "~")) or Path(name).is_dir() else cached_config(name)
    source = name  # a name the cache has ("org/model" too); else a folder, or a name the cache lacks
    if path is None:
        source, path = folder_or_name("hf", name, param)
    if path is None:  # a name (no folder) the cache lacks
        raise ParamError(param, f"{flag} hf:{source}: no config.json for it in the local Hugging Face cache: "
                         f"tpulab reaches no hub at run time; download it once (hf download {source} "
                         "config.json) or pass its folder")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ParamError(param, f"{flag} hf:{source}: its config.json cannot be read ({e})") from None
    if not isinstance(config, dict):
        raise ParamError(param, f"{flag} hf:{source}: its config.json holds no object")
    return source, config


def cached_config(name: str) -> Path | None:
    """A model name's config.json in the local Hugging Face cache, where huggingface_hub finds one (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo_id=name, filename="config.json")
    except ValueError:  # not a repository's name
        return None
    return Path(found) if isinstance(found, str) else None


def library(key: str) -> Any:
    """The library's module (imported in a worker), or one line with its install command."""
    lib = LIBRARIES[key]
    try:
        return importlib.import_module(lib.module)
    except ImportError:
        raise TpulabError(f"--model {key}: needs {lib.module}, which is not installed: pip install "
                          f"'tpulab[{lib.extra}]'") from None
