"""A convolution's per-channel epilogue as one vector helper: the requantization of an int8 layer.

A quantized layer's epilogue is a chain of elementwise ops, each on the previous value and a
constant that varies at most along the output channels:

    int32 sums + compensation -> float32 -> * weight scale[o] -> + bias[o] -> relu
        -> / output scale -> round (half to even) -> + zero point -> clamp -> uint8

Loop IR spells it per element, and the C compiler vectorizes that (a short channel loop, a
narrowing store, saturating conversions) poorly, in 128-bit pieces and scalar tails: it was two
thirds of MobileNetV2's int8 time. `channel_epilogue(...)` recognizes such a chain between a
kernel's contraction and its root and returns the ops; `channel_epilogue_source` writes them as a C
helper of AVX-512 intrinsics over the task's int32 tile, 16 channels a vector (masked at the tail;
channel_epilogue_avx2.py writes the AVX2 one, 8 channels a vector), with the graph's own float32 operations in the graph's order (a multiply then an add, never fused;
a true division), so its results are the reference interpreter's bit for bit.

The chain may instead start in float64 (`cast(sums, float64)`: ONNX's QLinearConv requantizes its
int32 sums in float64, as onnx's reference does): its steps then run on two vectors of doubles, the
same operations in the same order, up to the saturating cast to 8 bits or a cast to float32.

One binary op may instead take a side value: a stored tensor of the output's shape (a residual
block's input, 8-bit or float32) loaded at the output's own index, widened, and put through its
own constant steps (its dequantization). After the saturating cast to 8 bits, integer ops on
scalars may follow (a QDQ model with int8 activations hands the next layer uint8: cast to uint8,
add 128, wrapping), computed on the exact 8-bit value in each 32-bit lane and narrowed by
truncation. A chain with anything else (a reshape, a second reader of a middle value, a residual
read through a transpose) keeps the loop-IR epilogue.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ...ir.graph import Node
from ...loops.buffer import Buffer

# op -> the intrinsic applied to (value, operand), {p} the vector width's prefix (VectorIsa); "r" ops take
# the operand first
_BINARY = {"add": "{p}_add_ps({v}, b)", "mul": "{p}_mul_ps({v}, b)", "sub": "{p}_sub_ps({v}, b)",
           "rsub": "{p}_sub_ps(b, {v})", "div": "{p}_div_ps({v}, b)", "rdiv": "{p}_div_ps(b, {v})",
           "maximum": "{p}_max_ps({v}, b)", "minimum": "{p}_min_ps({v}, b)"}
_COMMUTATIVE = {"add", "mul", "maximum", "minimum"}
_UNARY = {"relu": "{p}_max_ps({v}, {p}_setzero_ps())", "round": "{round}"}
_ROUND_PD = {"avx512": "_mm512_roundscale_pd({v}, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)",
             "avx2": "_mm256_round_pd({v}, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)"}
# the graph's float -> 8-bit cast (NaN to 0, saturate, truncate): the range of each integer type
_RANGES = {"uint8": (0.0, 255.0), "int8": (-128.0, 127.0)}
_C_TYPES = {"uint8": "uint8_t", "int8": "int8_t", "float32": "float"}
# the types a chain's steps compute in: the stored types, and float64 lanes between the sums and a cast
_STEP_TYPES = {**_C_TYPES, "float64": "double"}
# an integer lane holding an exact 8-bit value after an op that wraps: uint8 keeps the low byte, int8
# sign-extends it
_WRAP = {"uint8": "v8 = {p}_and_{si}(v8, {p}_set1_epi32(255));",
         "int8": "v8 = {p}_srai_epi32({p}_slli_epi32(v8, 24), 24);"}
_INTEGER = {"add": "{p}_add_epi32(v8, b)", "sub": "{p}_sub_epi32(v8, b)", "rsub": "{p}_sub_epi32(b, v8)"}


@dataclass(frozen=True)
class VectorIsa:
    """How the helper spells its vector operations at one width: the intrinsics' prefix, the integer
    vector's suffix, the round to nearest even, a cast's NaN -> 0, and a float operand's load (`{at}`:
    the address), masked at the channel tail where the width has masks."""

    name: str
    p: str
    si: str
    lanes: int
    round: str
    nan_to_zero: str
    load_ps: str
    # float64 steps hold the lanes as two vectors of doubles, d0 (the first half) and d1
    widen_pd: str  # d0, d1 = the int32 `sums` as doubles
    load_pd: tuple[str, str]  # a per-channel float64 operand's two halves ({at}: the first channel's address)
    nan_to_zero_pd: str  # on {d}
    narrow_pd: str  # v = d0, d1 as float32 (correctly rounded)
    truncate_pd: str  # v8 = d0, d1 truncated to int32

    def spell(self, template: str, **names: str) -> str:
        """template with the width's names (and `names`) filled in."""
        return template.format(p=self.p, si=self.si, **names)


AVX512 = VectorIsa("avx512", "_mm512", "si512", 16,
                   "_mm512_roundscale_ps({v}, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)",
                   "v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);",
                   "_mm512_maskz_loadu_ps(m, {at})",
                   "d0 = _mm512_cvtepi32_pd(_mm512_castsi512_si256(sums));\n"
                   "            d1 = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(sums, 1));",
                   ("_mm512_maskz_loadu_pd((__mmask8)m, {at})", "_mm512_maskz_loadu_pd((__mmask8)(m >> 8), {at} + 8)"),
                   "{d} = _mm512_maskz_mov_pd(_mm512_cmp_pd_mask({d}, {d}, _CMP_ORD_Q), {d});",
                   "v = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(\n"
                   "                _mm256_castps_pd(_mm512_cvtpd_ps(d0))), _mm256_castps_pd(_mm512_cvtpd_ps(d1)), 1));",
                   "v8 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvttpd_epi32(d0)), "
                   "_mm512_cvttpd_epi32(d1), 1);")
AVX2 = VectorIsa("avx2", "_mm256", "si256", 8,
                 "_mm256_round_ps({v}, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)",
                 "v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));",
                 "_mm256_loadu_ps({at})",
                 "d0 = _mm256_cvtepi32_pd(_mm256_castsi256_si128(sums));\n"
                 "    d1 = _mm256_cvtepi32_pd(_mm256_extracti128_si256(sums, 1));",
                 ("_mm256_loadu_pd({at})", "_mm256_loadu_pd({at} + 4)"),
                 "{d} = _mm256_and_pd({d}, _mm256_cmp_pd({d}, {d}, _CMP_ORD_Q));",
                 "v = _mm256_set_m128(_mm256_cvtpd_ps(d1), _mm256_cvtpd_ps(d0));",
                 "v8 = _mm256_set_m128i(_mm256_cvttpd_epi32(d1), _mm256_cvttpd_epi32(d0));")


@dataclass(frozen=True)
class ChannelStep:
    """One op of the chain: `op` on the running value and a scalar or the channel vector `channel`
    (the index of the helper's per-channel pointer argument); unary ops have neither. `dtype`: the
    value's type after the op (float32 or float64, or an 8-bit type from the saturating cast on)."""

    op: str
    scalar: float | None = None
    channel: int | None = None
    dtype: str = "float32"
    side: int | None = None  # the operand is side value `side` (a residual), computed per element


@dataclass(frozen=True)
class SideValue:
    """A second operand read element by element at the output's own index (a residual block's input):
    a stored tensor of the contraction's shape, widened to float32, then its own constant steps."""

    dtype: str
    steps: tuple[ChannelStep, ...]


@dataclass(frozen=True)
class ChannelEpilogue:
    """The recognized chain: its steps, the stored dtype, the per-channel operands' buffers, and the
    side values with their buffers."""

    steps: tuple[ChannelStep, ...]
    store_dtype: str
    operands: tuple[Buffer, ...]
    sides: tuple[SideValue, ...] = ()
    side_buffers: tuple[Buffer, ...] = ()

    @property
    def function(self) -> str:
        """The helper's C name, a digest of what it computes."""
        text = repr((self.steps, self.store_dtype, self.sides))
        return "tk_channel_epilogue_" + hashlib.sha1(text.encode()).hexdigest()[:12]


def channel_epilogue(contraction: Node, root: Node, buffers: dict[int, Buffer]) -> ChannelEpilogue | None:
    """The chain from `contraction` (int32 sums, channels last) up to the kernel's `root`, or None when
    it is not: cast to float32, per-channel binary ops (whose operand may also be a side value: a
    stored tensor of the same shape, cast to float32, through ops of its own), relu and round, then
    either the end (float32) or a saturating cast to 8 bits followed by 8-bit casts and adds of
    scalars (and, for a dequantized output, a cast back to float32 and more float ops)."""
    if root is contraction or root.shape != contraction.shape or contraction.dtype.name != "int32" or \
            root.dtype.name not in _C_TYPES:
        return None
    chain = _path(contraction, root, buffers)
    if chain is None or chain[0].op != "cast" or chain[0].dtype.name not in ("float32", "float64"):
        return None
    steps, operands, sides, side_buffers = [], [], [], []
    if chain[0].dtype.name == "float64":  # the sums as doubles (exact)
        steps.append(ChannelStep("sums_to_float64", dtype="float64"))
    for below, node in zip(chain, chain[1:]):
        others = [x for x in node.inputs if x is not below]
        if len(others) == 1 and others[0].op != "constant":  # a side value: a residual
            side = _side_value(others[0], contraction, buffers, operands)
            if side is None or node.op not in _BINARY or node.dtype.name != "float32" or \
                    below.dtype.name != "float32":
                return None
            value, leaf = side
            op = node.op if node.inputs[1] is others[0] or node.op in _COMMUTATIVE else "r" + node.op
            steps.append(ChannelStep(op, side=len(sides)))
            sides.append(value)
            side_buffers.append(buffers[leaf.id])
            continue
        step = _step(node, below, contraction.shape[-1], buffers, operands)
        if step is None:
            return None
        steps.append(step)
    if (steps[-1].dtype if steps else "float32") != root.dtype.name:
        return None
    return ChannelEpilogue(tuple(steps), root.dtype.name, tuple(operands), tuple(sides), tuple(side_buffers))


def _path(contraction: Node, root: Node, buffers: dict[int, Buffer]) -> list[Node] | None:
    """The nodes from the contraction's reader up to root, each reading the previous one, none stored
    except root (a middle value another kernel reads would be stored here too), or None."""
    path, node = [], root
    while node is not contraction:
        if (node.id in buffers and node is not root) or node.shape != contraction.shape:
            return None
        below = [x for x in node.inputs if x is contraction or _reads(x, contraction, buffers)]
        if len(below) != 1:
            return None
        path.append(node)
        node = below[0]
    return path[::-1]


def _reads(node: Node, contraction: Node, buffers: dict[int, Buffer], depth: int = 64) -> bool:
    """Whether node's value, within this kernel (not through a stored buffer), reads the contraction."""
    if node is contraction:
        return True
    if depth == 0 or node.id in buffers or node.op == "constant":
        return False
    return any(_reads(x, contraction, buffers, depth - 1) for x in node.inputs)


def _side_value(node: Node, contraction: Node, buffers: dict[int, Buffer],
                operands: list[Buffer]) -> tuple[SideValue, Node] | None:
    """(the side value, its stored leaf) of a residual operand: a chain of single-operand ops down to a
    stored tensor of the contraction's shape (8-bit or float32), or None."""
    path = []
    while node.id not in buffers:
        inputs = [x for x in node.inputs if x.op != "constant"]
        if node is contraction or len(inputs) != 1 or node.shape != contraction.shape:
            return None
        path.append(node)
        node = inputs[0]
    leaf, path = node, path[::-1]
    if leaf.shape != contraction.shape or leaf.dtype.name not in _C_TYPES:
        return None
    previous = leaf
    if leaf.dtype.name != "float32":  # widened exactly first
        if not path or path[0].op != "cast" or path[0].dtype.name != "float32":
            return None
        previous, path = path[0], path[1:]
    steps = []
    for node in path:
        step = _step(node, previous, contraction.shape[-1], buffers, operands)
        if step is None or step.dtype != "float32" or step.op in ("saturate", "wrap", "widen"):
            return None
        steps.append(step)
        previous = node
    return SideValue(leaf.dtype.name, tuple(steps)), leaf


def _step(node: Node, below: Node, channels: int, buffers: dict[int, Buffer],
          operands: list[Buffer]) -> ChannelStep | None:
    """The step `node` applies to its operand `below` (the other operand, if any, a constant), or None."""
    dtype, before = node.dtype.name, below.dtype.name
    if dtype not in _STEP_TYPES or before not in _STEP_TYPES:
        return None
    if node.op == "cast":
        if before in ("float32", "float64") and dtype in _RANGES:
            return ChannelStep("saturate", dtype=dtype)
        if before in _RANGES and dtype in _RANGES:
            return ChannelStep("wrap", dtype=dtype)
        if before in _RANGES and dtype == "float32":  # a dequantized output: exact
            return ChannelStep("widen")
        if before == "float64" and dtype == "float32":
            return ChannelStep("narrow")
        return None
    if node.op in _UNARY and dtype in ("float32", "float64"):
        return ChannelStep(node.op, dtype=dtype)
    integer = dtype in _RANGES
    if node.op not in (_INTEGER if integer else _BINARY) or len(node.inputs) != 2:
        return None
    constant_first = node.inputs[0] is not below
    constant = node.inputs[0 if constant_first else 1]
    if constant.op != "constant" or constant.dtype.name != dtype:
        return None
    op = node.op if not constant_first or node.op in _COMMUTATIVE else "r" + node.op
    if constant.type.size == 1:
        scalar = constant.attrs["value"].array.reshape(-1)[0]
        value = int(scalar) if integer else float(scalar) if dtype == "float64" else float(np.float32(scalar))
        return ChannelStep(op, scalar=value, dtype=dtype)
    if not integer and constant.shape[-1] == channels and constant.type.size == channels and constant.id in buffers \
            and buffers[constant.id].dtype == dtype:
        operands.append(buffers[constant.id])
        return ChannelStep(op, channel=len(operands) - 1, dtype=dtype)
    return None


def _operand(step: ChannelStep, isa: VectorIsa, c: str) -> str:
    if step.side is not None:
        return f"side_value{step.side}"
    if step.scalar is not None:
        return isa.spell("{p}_set1_ps({x})", x=f"{float(step.scalar).hex()}f" if np.isfinite(step.scalar) else
                         f"{'-' if step.scalar < 0 else ''}INFINITY" if np.isinf(step.scalar) else "NAN")
    return isa.load_ps.format(at=f"channel{step.channel}{c}")


def _literal_pd(value: float) -> str:
    return float(value).hex() if np.isfinite(value) else f"{'-' if value < 0 else ''}INFINITY" if np.isinf(value) \
        else "NAN"


def _c_step_pd(step: ChannelStep, isa: VectorIsa, c: str) -> str:
    """A float64 step as C on the two vectors of doubles d0 and d1, or the cast that leaves them (to 8 bits,
    or to float32 in `v`)."""
    vector = "__m512d" if isa.lanes == 16 else "__m256d"
    if step.op == "sums_to_float64":
        return f"{isa.widen_pd}  /* cast to float64 */"
    if step.op == "narrow":
        return f"{isa.narrow_pd}  /* cast to float32 */"
    if step.op == "saturate":
        low, high = _RANGES[step.dtype]
        nan = " ".join(isa.nan_to_zero_pd.format(d=d) for d in ("d0", "d1"))
        clamp = " ".join(isa.spell("{d} = {p}_min_pd({p}_max_pd({d}, {p}_set1_pd({low})), {p}_set1_pd({high}));",
                                   d=d, low=f"{low:.1f}", high=f"{high:.1f}") for d in ("d0", "d1"))
        return (f"{nan}  /* cast: NaN -> 0, */\n            {clamp}  /* saturate, */\n"
                f"            {isa.truncate_pd}  /* truncate to {step.dtype} */")
    if step.op in _UNARY:
        spell = (_ROUND_PD[isa.name] if step.op == "round" else "{p}_max_pd({v}, {p}_setzero_pd())")
        return " ".join(f"{d} = {isa.spell(spell, v=d)};" for d in ("d0", "d1")) + f"  /* {step.op} (float64) */"
    operation = _BINARY[step.op].replace("_ps(", "_pd(")
    if step.scalar is not None:
        return (f"{{ const {vector} b = {isa.spell('{p}_set1_pd({x})', x=_literal_pd(step.scalar))}; "
                f"d0 = {isa.spell(operation, v='d0')}; d1 = {isa.spell(operation, v='d1')}; }}  "
                f"/* {step.op} (float64) */")
    halves = [load.format(at=f"channel{step.channel}{c}") for load in isa.load_pd]
    return (f"{{ const {vector} b0 = {halves[0]}, b1 = {halves[1]};\n"
            f"              d0 = {isa.spell(operation.replace('b)', 'b0)'), v='d0')}; "
            f"d1 = {isa.spell(operation.replace('b)', 'b1)'), v='d1')}; }}  /* {step.op} (float64) */")


def _c_step(step: ChannelStep, isa: VectorIsa, c: str, v: str = "v", source: str = "float32") -> str:
    """One step as C on `v` (float32 lanes), `v8` (the exact 8-bit value in int32 lanes) or d0 and d1
    (float64 lanes; `source`: the value's type before the step); `c` the channel operands' offset (" + c",
    or "" where the pointers already point at the vector's channels)."""
    if step.dtype == "float64" or source == "float64":
        return _c_step_pd(step, isa, c)
    if step.op == "saturate":
        low, high = _RANGES[step.dtype]
        return (f"{isa.nan_to_zero}  /* cast: NaN -> 0, */\n" +
                isa.spell("            v = {p}_min_ps({p}_max_ps(v, {p}_set1_ps({low})), {p}_set1_ps({high}));  "
                          "/* saturate, */\n"
                          "            v8 = {p}_cvttps_epi32(v);  /* truncate to {dtype} */",
                          low=f"{low:.1f}f", high=f"{high:.1f}f", dtype=step.dtype))
    if step.op == "wrap":
        return f"{isa.spell(_WRAP[step.dtype])}  /* cast to {step.dtype} */"
    if step.op == "widen":
        return isa.spell("v = {p}_cvtepi32_ps(v8);  /* cast to float32 */")
    vector = "__m512" if isa.lanes == 16 else "__m256"
    if step.dtype in _RANGES:
        return (f"{{ const {vector}i b = {isa.spell('{p}_set1_epi32')}({int(step.scalar)}); "
                f"v8 = {isa.spell(_INTEGER[step.op])}; }}  /* {step.op} ({step.dtype}) */\n"
                f"            {isa.spell(_WRAP[step.dtype])}")
    if step.op in _UNARY:
        return f"{v} = {isa.spell(_UNARY[step.op], v=v, round=isa.round.format(v=v))};  /* {step.op} */"
    return (f"{{ const {vector} b = {_operand(step, isa, c)}; {v} = {isa.spell(_BINARY[step.op], v=v)}; }}  "
            f"/* {step.op} */")


def _clamped_within(steps: tuple[ChannelStep, ...], i: int) -> bool:
    """Whether steps i - 2 and i - 1 clamp by scalars within the range of the saturating cast at i: the
    value is then never NaN (`_mm512_max_ps(v, b)` and `_mm512_min_ps(v, b)` give b for a NaN v) and already
    in range, so the cast's own NaN test and clamp would not change it."""
    if i < 2 or {steps[i - 2].op, steps[i - 1].op} != {"maximum", "minimum"}:
        return False
    low, high = _RANGES[steps[i].dtype]
    bounds = {step.op: step.scalar for step in steps[i - 2:i]}
    return all(b is not None and np.isfinite(b) for b in bounds.values()) and \
        low <= bounds["maximum"] <= high and low <= bounds["minimum"] <= high


def _reciprocal(divisor: float | None) -> np.float32 | None:
    """1 / divisor correctly rounded to float32, where divisor and it are normal numbers, else None."""
    if divisor is None or not np.isfinite(divisor) or abs(divisor) < np.finfo(np.float32).tiny:
        return None
    with np.errstate(over="ignore"):
        y = np.float32(1.0) / np.float32(divisor)
    return y if np.isfinite(y) and abs(y) >= np.finfo(np.float32).tiny else None


def _exact_division(divisor: float, isa: VectorIsa) -> str:
    """v / divisor as a multiply by the rounded reciprocal y and one correction, q + (v - q * divisor) * y with
    the remainder exact in an FMA: the correctly rounded quotient (Markstein's theorem; the values here
    neither overflow nor underflow), in three pipelined operations where `vdivps` takes six cycles. Only
    before a round and an 8-bit store: 0 / divisor gives +0 for -0, which the conversion to 8 bits equates."""
    y = float(_reciprocal(divisor))
    vector = "__m512" if isa.lanes == 16 else "__m256"
    return isa.spell("{{ const {vector} b = {p}_set1_ps({b}), y = {p}_set1_ps({y});\n"
                     "              const {vector} q = {p}_mul_ps(v, y);\n"
                     "              v = {p}_fmadd_ps({p}_fnmadd_ps(q, b, v), y, q); }}  /* div: correctly rounded */",
                     vector=vector, b=f"{float(divisor).hex()}f", y=f"{y.hex()}f")


def _c_chain(steps: tuple[ChannelStep, ...], store_dtype: str, isa: VectorIsa, c: str) -> list[str]:
    """The C of the chain's steps, leaving out work that cannot change the stored value (and dividing by a
    scalar as a multiply and a correction, _exact_division): the saturating
    cast's NaN test and clamp right after a clamp within its range, an integer wrap that the next
    integer op's wrap repeats, and the last wrap before an 8-bit store (which keeps the low byte)."""
    lines = []
    for i, step in enumerate(steps):
        following = steps[i + 1] if i + 1 < len(steps) else None
        source = steps[i - 1].dtype if i else "float32"
        integer_next = following is not None and following.dtype == step.dtype and following.op in _INTEGER
        if step.op == "div" and step.dtype == "float32" and following is not None and following.op == "round" \
                and store_dtype in _RANGES and _reciprocal(step.scalar) is not None:
            lines.append(_exact_division(step.scalar, isa))
        elif step.op == "saturate" and _clamped_within(steps, i):
            convert = isa.truncate_pd if source == "float64" else isa.spell("v8 = {p}_cvttps_epi32(v);")
            lines.append(f"{convert}  /* cast to {step.dtype}: already clamped */")
        elif step.op == "wrap" and integer_next:
            lines.append(f"/* cast to {step.dtype}: wrapped by the next op */")
        elif step.dtype in _RANGES and step.op in _INTEGER and following is None and store_dtype in _RANGES:
            operation = _c_step(step, isa, c).split("\n")[0]  # the op without its wrap
            lines.append(operation.replace(f"/* {step.op} ({step.dtype}) */",
                                           f"/* {step.op} ({step.dtype}): the store keeps the low byte */"))
        else:
            lines.append(_c_step(step, isa, c, source=source))
    return lines


def _parameters(epilogue: ChannelEpilogue) -> str:
    """The helper's per-channel and side-value pointer parameters."""
    pointers = "".join(f", const {_STEP_TYPES[b.dtype]} *restrict channel{i}" for i, b in enumerate(epilogue.operands))
    return pointers + "".join(f", const {_C_TYPES[side.dtype]} *restrict side{i}"
                              for i, side in enumerate(epilogue.sides))


def _first(epilogue: ChannelEpilogue) -> str:
    """The type the chain starts in: float32, or float64."""
    return "float64" if epilogue.steps and epilogue.steps[0].op == "sums_to_float64" else "float32"


def _ops(epilogue: ChannelEpilogue) -> str:
    return ", ".join(s.op if s.dtype == "float32" else f"{s.op} ({s.dtype})" for s in epilogue.steps
                     if s.op != "sums_to_float64")


def channel_epilogue_source(epilogue: ChannelEpilogue, isa: VectorIsa = AVX512) -> str:
    """The C of the helper: out[r * ldo + c] = chain(tile[r * ldt + c] + comp[c]) for r < rows, c < cols."""
    if isa is not AVX512:  # a caller's bug: the 256-bit helper is channel_epilogue_avx2.avx2_source
        raise ValueError(f"channel_epilogue_source writes the {AVX512.name} helper, not the {isa.name} one")
    ctype = _C_TYPES[epilogue.store_dtype]
    loads = []
    for i, side in enumerate(epilogue.sides):
        at = f"side{i} + r * ldo + c"
        load = {"float32": f"_mm512_maskz_loadu_ps(m, {at})",
                "uint8": f"_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, {at})))",
                "int8": f"_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, {at})))"}[side.dtype]
        loads.append(f"__m512 side_value{i} = {load};  /* side value {i}: {side.dtype} at the output's index */")
        loads += [_c_step(step, isa, " + c", f"side_value{i}") for step in side.steps]
    steps = "\n            ".join(loads + _c_chain(epilogue.steps, epilogue.store_dtype, isa, " + c"))
    if epilogue.store_dtype == "float32":
        store = "_mm512_mask_storeu_ps(out + r * ldo + c, m, v);"
    else:  # each lane holds the exact 8-bit value: the low byte is it
        store = "_mm_mask_storeu_epi8(out + r * ldo + c, m, _mm512_cvtepi32_epi8(v8));"
    return f"""#include <immintrin.h>
#include <math.h>
/* a convolution's epilogue, 16 channels a vector: int32 sums + compensation -> {_first(epilogue)} -> {_ops(epilogue)}
 * (kernels/templates/channel_epilogue.py) */
static void {epilogue.function}(
    const int32_t *restrict tile, int64_t ldt, const int32_t *restrict comp{_parameters(epilogue)},
    {ctype} *restrict out, int64_t ldo, int64_t rows, int64_t cols)
{{
    for (int64_t r = 0; r < rows; r++) {{
        for (int64_t c = 0; c < cols; c += 16) {{
            const __mmask16 m = cols - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - c)) - 1u);
            const __m512i sums = _mm512_add_epi32(_mm512_maskz_loadu_epi32(m, tile + r * ldt + c),
                                                  _mm512_maskz_loadu_epi32(m, comp + c));
            __m512 v = _mm512_cvtepi32_ps(sums);
            __m512i v8 = _mm512_setzero_si512();
            __m512d d0 = _mm512_setzero_pd(), d1 = d0;  /* float64 steps' halves */
            {steps}
            (void)v8; (void)d0; (void)d1;
            {store}
        }}
    }}
}}
"""


__all__ = ["AVX2", "AVX512", "ChannelEpilogue", "ChannelStep", "VectorIsa", "channel_epilogue",
           "channel_epilogue_source"]
