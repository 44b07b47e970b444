"""What an optimized HLO module says of each op a trace names: its type, category, FLOPs and bytes (framework-free).

Read from the module's text (`jitted.lower(...).compile().as_text()`), whose instruction names are the
trace's `hlo_op`s. FLOPs: a dot's or convolution's shapes (2 per multiply-add; a GPU's cuBLAS and cuDNN
custom calls too), and one per element of each elementwise or reduced value, as XLA's cost analysis counts
them; a fusion sums what it calls. Bytes: the op's operands and result, as it reads and writes them.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from tpulab.backends.profile_table import COLLECTIVE, ELEMENTWISE, HOST_TO_DEVICE, MATMUL, MOVEMENT, OTHER, REDUCTION, \
    OpInfo, Programs

BYTES = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
         "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}  # f8 types: 1 (below)
ARITHMETIC = {"add", "subtract", "multiply", "divide", "exponential", "exponential-minus-one", "log", "log-plus-one",
              "tanh", "logistic", "sqrt", "rsqrt", "cbrt", "power", "negate", "abs", "maximum", "minimum", "compare",
              "select", "clamp", "floor", "ceil", "round-nearest-afz", "round-nearest-even", "sign", "sine", "cosine",
              "tan", "atan2", "erf", "remainder", "and", "or", "xor", "not", "convert", "is-finite", "real", "imag",
              "reduce-precision"}
MOVING = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "copy", "transpose", "reshape",
          "broadcast", "slice", "dynamic-slice", "dynamic-update-slice", "concatenate", "pad", "gather", "scatter",
          "reverse", "iota", "bitcast-convert", "copy-start", "copy-done"}
COLLECTIVES = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute", "all-reduce-start",
               "all-reduce-done", "all-gather-start", "all-gather-done", "collective-permute-start",
               "collective-permute-done", "collective-broadcast", "ragged-all-to-all"}
TRANSFERS = {"infeed", "outfeed"}
REDUCING = {"reduce", "reduce-window", "select-and-scatter"}
LITERAL_OPERANDS = {"parameter", "constant", "iota"}  # what is in their parentheses is a literal, not an operand

_HEADER = re.compile(r"^\s*HloModule\s+([^\s,]+)")
_COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?([^\s(]+)\s*\(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*(\(.*?\)|\S+)\s+([a-z][\w\-]*)\(([^)]*)\)(.*)$")
_OPERAND = re.compile(r"%([^\s,]+)")
_CALLED = re.compile(r"(?:calls|to_apply)=%?([\w.\-]+)")  # what a fusion calls, a reduction applies
_DIGITS = re.compile(r"\d+")  # of a dimension: "64", "<=64" (dynamic, its bound)
_FUSED = re.compile(r"calls=%?([\w.\-]+)")  # what a fusion (or a call) runs as its own work
_TARGET = re.compile(r'custom_call_target="([^"]+)"')
_ARRAY = re.compile(r"([a-z]\w*)\[([^\]]*)\]")


@dataclass
class Instruction:
    name: str
    shape: str  # "f32[64,48]{1,0}" or a tuple "(f32[64]{0}, u8[0])"
    opcode: str
    operands: list[str]
    attrs: str


def parse_instruction(line: str) -> Instruction | None:
    """One instruction line ("%dot.1 = f32[64,48]{1,0} dot(%a, %b), lhs_contracting_dims={1}"), or None."""
    match = _INSTRUCTION.match(line)
    if not match:
        return None
    name, shape, opcode, operands, attrs = match.groups()
    names = _OPERAND.findall(operands) if "%" in operands else [p.split()[-1] for p in operands.split(",") if p.strip()]
    return Instruction(name, shape, opcode, names, attrs)


def arrays(shape: str) -> list[tuple[str, list[int]]]:
    """A shape's arrays: "(f32[2,3]{1,0}, s32[])" -> [("f32", [2, 3]), ("s32", [])]."""
    return [(kind, [int(d) for d in _DIGITS.findall(dims)])
            for kind, dims in _ARRAY.findall(shape.split("{")[0] if not shape.startswith("(") else shape)]


def size(shape: str) -> float:
    """Bytes of a shape (a tuple's arrays summed)."""
    return sum(math.prod(dims) * BYTES.get(kind, 1 if kind.startswith("f8") else 0) for kind, dims in arrays(shape))


def elements(shape: str) -> int | None:
    """Elements of a shape's first array; None where it has none that can be read."""
    found = arrays(shape)
    return math.prod(found[0][1]) if found else None


def _target(ins: Instruction) -> str:
    """A custom call's target ("__cublas$gemm"), "" for any other op."""
    target = _TARGET.search(ins.attrs) if ins.opcode == "custom-call" else None
    return target.group(1) if target else ""


def _dims(attrs: str, key: str) -> list[int] | None:
    """The dimensions an attribute lists ("lhs_contracting_dims={1}" -> [1]); None where it is not there."""
    match = re.search(rf"\b{key}=\{{([\d,]*)\}}", attrs)
    return [int(d) for d in match.group(1).split(",") if d] if match else None


class Module:
    """One HLO module's computations, with each instruction's shape by name."""

    def __init__(self, text: str) -> None:
        header = _HEADER.search(text)
        self.name = header.group(1) if header else ""
        self.computations: dict[str, list[Instruction]] = {}
        self.shapes: dict[str, str] = {}
        current: list[Instruction] | None = None
        for line in text.splitlines():
            if (head := _COMPUTATION.match(line)) and " = " not in line.split("(")[0]:
                current = self.computations.setdefault(head.group(1).lstrip("%"), [])
            elif line.strip() == "}":
                current = None
            elif current is not None and (instruction := parse_instruction(line)):
                current.append(instruction)
                self.shapes[instruction.name] = instruction.shape
        # what a fusion calls and a reduction applies: run inside their caller, never named in a trace
        self.inner = {c for ins in self.instructions() for c in _CALLED.findall(ins.attrs)}

    def instructions(self) -> list[Instruction]:
        return [i for body in self.computations.values() for i in body]

    def flops(self, ins: Instruction) -> float | None:
        """FLOPs of one instruction, what it fuses included; None where it (or what it fuses) does work not
        counted here (a loop, a call, a sort, random numbers, another custom call): unknown, never 0."""
        if ins.opcode == "dot" or re.search(r"gemm|matmul", _target(ins), re.I):
            return self._dot(ins)
        if ins.opcode == "convolution" or (_target(ins) and "dim_labels=" in ins.attrs):
            return self._convolution(ins)
        fused = [self.flops(i) for c in _FUSED.findall(ins.attrs) for i in self.computations.get(c, [])]
        if any(f is None for f in fused):
            return None
        inner = sum(f for f in fused if f is not None)
        if ins.opcode in ARITHMETIC:
            return None if (n := elements(ins.shape)) is None else inner + n
        if ins.opcode in REDUCING and ins.operands:
            return None if (n := elements(self.shapes.get(ins.operands[0], ""))) is None else inner + n
        if ins.opcode == "fusion" or ins.opcode in MOVING | COLLECTIVES | TRANSFERS:
            return inner
        return None

    def _dot(self, ins: Instruction) -> float | None:
        """2 per multiply-add; None where the result's or the left operand's shape, or which of its dimensions
        are contracted, cannot be read (an attribute that is there and empty, an outer product, contracts none)."""
        contracting = _dims(ins.attrs, "lhs_contracting_dims")
        if contracting is None and (config := re.search(r'"lhs_contracting_dimensions":\[([^\]]*)\]', ins.attrs)):
            contracting = [int(d) for d in json.loads(f"[{config.group(1)}]")]
        lhs = arrays(self.shapes.get(ins.operands[0], "")) if ins.operands else []
        out = elements(ins.shape)
        if contracting is None or not lhs or out is None or any(d >= len(lhs[0][1]) for d in contracting):
            return None
        return 2.0 * out * math.prod(lhs[0][1][d] for d in contracting)

    def _convolution(self, ins: Instruction) -> float | None:
        """2 per multiply-add: each output element takes the kernel's elements over its output features; None
        where the kernel's shape or its dimension labels cannot be read."""
        labels = re.search(r"dim_labels=\w+_(\w+)->", ins.attrs)
        kernel = arrays(self.shapes.get(ins.operands[1], "")) if len(ins.operands) > 1 else []
        out = elements(ins.shape)
        if not labels or not kernel or out is None or "o" not in labels.group(1) \
                or len(labels.group(1)) != len(kernel[0][1]):
            return None
        dims = kernel[0][1]
        return 2.0 * out * math.prod(dims) / max(1, dims[labels.group(1).index("o")])

    def bytes(self, ins: Instruction) -> float | None:
        """What it reads and writes: its operands and its result; None where an operand's shape is not in the
        module (a parameter's or a constant's operands are literals, not values read)."""
        if ins.opcode in LITERAL_OPERANDS:
            return size(ins.shape)
        read = [self.shapes.get(o) for o in ins.operands]
        return None if None in read else size(ins.shape) + sum(size(s) for s in read if s is not None)

    def opcodes(self, ins: Instruction) -> set[str]:
        """Its opcode and those of everything it calls."""
        found = {ins.opcode}
        for c in _FUSED.findall(ins.attrs):
            for inner in self.computations.get(c, []):
                found |= self.opcodes(inner)
        return found

    def category(self, ins: Instruction) -> str:
        ops = self.opcodes(ins)
        if {"dot", "convolution"} & ops or re.search(r"gemm|matmul|conv", _target(ins), re.I):
            return MATMUL
        if COLLECTIVES & ops:
            return COLLECTIVE
        if TRANSFERS & ops or "is_host_transfer=true" in ins.attrs:
            return HOST_TO_DEVICE
        if REDUCING & ops:
            return REDUCTION
        if ARITHMETIC & ops:
            return ELEMENTWISE
        if ops <= MOVING | {"fusion"}:
            return MOVEMENT
        return OTHER

    def type(self, ins: Instruction) -> str:
        """The opcode; a fusion's kind ("loop fusion"), a custom call's target."""
        if ins.opcode == "fusion" and (kind := re.search(r"kind=k(\w+)", ins.attrs)):
            return f"{kind.group(1).lower()} fusion"
        return _target(ins) or ins.opcode

    def ops(self) -> dict[tuple[str | None, str], OpInfo]:
        """Every instruction a trace can name (those outside fusions), by (module, name)."""
        out = {}
        for computation, body in self.computations.items():
            if computation in self.inner:
                continue
            for ins in body:
                out[(self.name, ins.name)] = OpInfo(self.type(ins), self.category(ins), self.flops(ins), self.bytes(ins))
        return out


def hlo_ops(texts: list[str]) -> Programs:
    """What the optimized HLO modules `texts` say of their ops, by (module name, instruction name)."""
    out: dict[tuple[str | None, str], OpInfo] = {}
    for text in texts:
        out.update(Module(text).ops())
    return out
