"""A GGUF file the user gives (`--model gguf:FILE`), read as decode's shape: its architecture and sizes from its
metadata, and what a token reads from its tensors as stored (a Q4_0 file's output matrix is often Q6_K), so that the
bytes per token, MBU and the cache follow the file. Read with the gguf package (`tpulab[llamacpp]`), no framework,
in whichever process asks; each file once per process.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from tpulab.workloads.base import ParamError

PREFIX = "gguf:"
MODEL = "model"
ARCHITECTURES = {"llama": {"positions": "rope", "block": "llama"}, "gpt2": {"positions": "learned", "block": "gpt2"}}
ONE_ROW = ("token_embd.weight", "position_embd.weight")  # a token reads one row of each (the token table whole where
# it is also the output projection: no output.weight)


@dataclass(frozen=True)
class GGUFModel:
    shape: dict[str, Any]  # decode's shape parameters
    parameters: int  # every weight in the file
    token_bytes: float  # what one token's step reads of the weights, as stored
    formats: str  # its matrices' formats, most bytes first: 'q4_0 + q6_k'


def source(p: Mapping[str, Any]) -> Path | None:
    """The file `--model gguf:FILE` names, or None for another model (or none)."""
    given = str(p.get(MODEL) or "")
    return Path(given[len(PREFIX):]).expanduser() if given.startswith(PREFIX) else None


def of(p: Mapping[str, Any]) -> GGUFModel | None:
    """The GGUF model a run decodes, or None where it decodes no file of the user's."""
    path = source(p)
    return read(str(path)) if path is not None else None


@lru_cache(maxsize=8)
def read(path: str) -> GGUFModel:
    """The file's shape and bytes; `ParamError` on --model, in one line, for a file that is none, an architecture
    decode cannot count, or the gguf package missing."""
    try:
        import gguf
    except ImportError:
        from tpulab.backends import registry

        install = next((b.install for b in registry().values() if "gguf" in (*b.distributions, *b.packages)),
                       "pip install gguf")  # the backend that reads GGUF files installs it
        raise ParamError(MODEL, f"--model gguf:{path}: reading a GGUF file needs the gguf package: {install}") from None
    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError) as e:
        raise ParamError(MODEL, f"--model gguf:{path}: not a GGUF file llama.cpp reads ({str(e)[:120]})") from None
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.")}
    arch = str(fields.get("general.architecture", ""))
    if arch not in ARCHITECTURES:
        raise ParamError(MODEL, f"--model gguf:{path}: its architecture is {arch or 'not given'}; decode counts "
                         f"{' and '.join(ARCHITECTURES)} (their shapes give its figures)")
    tensors = {t.name: t for t in reader.tensors}

    def size(key: str) -> int:
        if f"{arch}.{key}" not in fields:
            raise ParamError(MODEL, f"--model gguf:{path}: its metadata has no {arch}.{key}")
        return int(fields[f"{arch}.{key}"])

    heads = size("attention.head_count")
    embedding = tensors.get("token_embd.weight")
    if embedding is None:
        raise ParamError(MODEL, f"--model gguf:{path}: it has no token_embd.weight")
    kv = fields.get(f"{arch}.attention.head_count_kv")
    shape = {"layers": size("block_count"), "width": size("embedding_length"), "heads": heads,
             "kv_heads": int(kv) if kv else heads, "mlp_width": size("feed_forward_length"),
             "vocab": int(embedding.shape[-1]), "context": size("context_length"), **ARCHITECTURES[arch]}
    tied = "output.weight" not in tensors
    read_whole = [t for name, t in tensors.items() if name not in ONE_ROW or (tied and name == "token_embd.weight")]
    rows = sum(int(t.n_bytes) // int(t.shape[-1]) for name, t in tensors.items()
               if name in ONE_ROW and not (tied and name == "token_embd.weight"))
    by_type: dict[str, int] = {}
    for t in tensors.values():
        if len(t.shape) == 2:
            by_type[t.tensor_type.name.lower()] = by_type.get(t.tensor_type.name.lower(), 0) + int(t.n_bytes)
    return GGUFModel(shape=shape, parameters=sum(int(t.n_elements) for t in tensors.values()),
                     token_bytes=float(sum(int(t.n_bytes) for t in read_whole) + rows),
                     formats=" + ".join(sorted(by_type, key=lambda k: -by_type[k])))


def with_file(p: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The parameters with the file's shape, and why each is what it is; `ParamError` where one was set to another
    value than the default and the file's, or a --weight-format given (the format is the file's)."""
    path = source(p)
    assert path is not None
    model = read(str(path))
    for name, value in model.shape.items():
        if p[name] != value and p[name] != defaults[name]:
            raise ParamError(name, f"--{name.replace('_', '-')} {p[name]}: gguf:{path}'s metadata says {value} "
                             "(with --model, the shape is the model's)")
    if p.get("weight_format", "dtype") != "dtype":
        raise ParamError("weight_format", f"--weight-format {p['weight_format']}: gguf:{path} holds its weights "
                         f"as {model.formats}, read as they are")
    return {**p, **model.shape}, {name: f"from gguf:{path}'s metadata" for name in model.shape}
