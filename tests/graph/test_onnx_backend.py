"""ONNX's own operator tests (``onnx.backend.test`` node cases) through ``tuner.compile_model``.

ONNX ships, for every operator, small models with inputs and expected outputs
(the "node" tests, generated in memory from ``onnx.backend.test.case.node``).
:class:`TunerBackend` is an ``onnx.backend.base.Backend`` whose ``prepare``
compiles the model with ``tuner.compile_model`` and whose rep runs
``Module.run``; ``onnx.backend.test.BackendTest`` turns each case into a test.

Which cases run is decided per case, not by guessing test names from op names:
a case is selected when every node of its graph is a default-domain operator
listed by ``tuner.graph.ops.supported()``, its opset is at most
:data:`MAX_OPSET` (or newer with nothing but types added since, see
:func:`at_max_opset`), every tensor it has (inputs, outputs, initializers, inferred
intermediates) is of a te dtype with no zero-size dimension, and no pattern of
:data:`EXCLUDE` (what we do not support on purpose, each with its reason)
matches its name. :data:`FAST` names the representative cases of the default
run; the rest are ``slow``.

Building the case list costs about 20 s at collection: ONNX computes the
expected outputs of its pooling cases in Python loops.
"""

from __future__ import annotations

import re
import unittest
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.backend.test
import onnx.shape_inference
import pytest
from onnx import TensorProto
from onnx.backend.base import Backend, BackendRep
from onnx.backend.test.case.test_case import TestCase

import tuner
from tuner.graph.ops import supported

# The module skips until the compiler's entry point exists (getattr keeps mypy quiet meanwhile).
_compile = getattr(tuner, "compile_model", None)
if _compile is None:
    pytest.skip("tuner.compile_model is not there yet", allow_module_level=True)
compile_model: Callable[..., Any] = _compile

#: The newest default-domain opset the IR takes (its semantics are opset 13..21).
MAX_OPSET = 21
#: The element types te has (contracts: bool, int8, uint8, int32, int64, float32, float64).
TE_DTYPES = frozenset(
    {
        TensorProto.BOOL,
        TensorProto.INT8,
        TensorProto.UINT8,
        TensorProto.INT32,
        TensorProto.INT64,
        TensorProto.FLOAT,
        TensorProto.DOUBLE,
    }
)
#: ONNX's default is atol 1e-7; our float32 kernels sum in another order than the reference.
ATOL = 1e-5

#: Cases we do not support on purpose, by name (regex searched in the test name), and why.
#: The dtype, opset and zero-size checks of ``why_not`` catch most of these by
#: themselves; the list says it in words and guards against a case whose types lie.
EXCLUDE: tuple[tuple[str, str], ...] = (
    (
        r"training",
        "training mode (Dropout masks, BatchNormalization batch statistics): inference only",
    ),
    (r"fp16|float16|bf16|bfloat16", "float16/bfloat16: no te dtype"),
    (
        r"quantizelinear_blocked",
        "blocked quantization (opset 21's block_size): refused in one line",
    ),
    (
        r"float8|FLOAT8|e4m3|e5m2|int4|INT4|uint4|UINT4|float4|FLOAT4|int2|INT2",
        "8/4/2-bit types: no te dtype",
    ),
    (
        r"uint8|UINT8|uint16|UINT16|uint32|UINT32|uint64|UINT64|int16|INT16",
        "unsigned and 16-bit integers: no te dtype",
    ),
    (r"string|STRING", "strings: no te dtype"),
    (r"sequence|_seq_|optional", "sequence and optional values: tensors only"),
    (r"_empty|zero_size", "zero-size tensors: not supported (GraphError)"),
    (r"^test_dropout_random", "random outputs cannot be compared"),
    (r"_cuda$", "CPU only"),
    (
        r"^test_(rms_normalization|rotary_embedding).*_expanded",
        "onnx's shape inference leaves ranks unknown in these function bodies (opset 23); "
        "the importer needs every rank (one-line GraphError)",
    ),
    (r"^test_maxpool_with_argmax", "MaxPool's Indices output is not supported (GraphError)"),
    (r"^test_dropout_default_mask", "Dropout's mask output is not supported (GraphError)"),
)

#: The default run: a few cases of each family, chosen to cover broadcasting, attributes read
#: from inputs, negative axes, opset-dependent forms and function-expanded graphs.
FAST: frozenset[str] = frozenset(
    {
        # quantization
        "test_quantizelinear",
        "test_quantizelinear_axis",
        "test_dequantizelinear",
        "test_dequantizelinear_axis",
        "test_dynamicquantizelinear_expanded",
        # elementwise
        "test_add_bcast",
        "test_mul_bcast",
        "test_pow_bcast_array",
        "test_relu",
        "test_sigmoid_example",
        "test_erf",
        "test_leakyrelu_example",
        "test_clip_default_inbounds",
        "test_clip_splitbounds",
        "test_where_long_example",
        "test_cast_FLOAT_to_DOUBLE",
        "test_gelu_default_1",
        "test_hardswish",
        "test_equal_bcast",
        # reductions and normalisation
        "test_softmax_axis_1",
        "test_softmax_negative_axis_expanded",
        "test_logsoftmax_axis_2",
        "test_reduce_mean_keepdims_example",
        "test_reduce_sum_negative_axes_keepdims_example",
        "test_reduce_max_do_not_keepdims_example",
        "test_layer_normalization_3d_axis_negative_1_epsilon",
        "test_globalaveragepool",
        "test_batchnorm_example",
        # anchors
        "test_conv_with_strides_padding",
        "test_conv_with_autopad_same",
        "test_maxpool_2d_pads",
        "test_averagepool_2d_strides",
        "test_matmul_3d",
        "test_gemm_all_attributes",
        # movement and shape arithmetic
        "test_reshape_negative_extended_dims",
        "test_transpose_all_permutations_3",
        "test_flatten_negative_axis1",
        "test_unsqueeze_negative_axes",
        "test_concat_3d_axis_negative_1",
        "test_slice_neg_steps",
        "test_gather_1",
        "test_expand_dim_changed",
        "test_edge_pad",
        "test_split_equal_parts_2d_opset13",
        "test_shape_start_1",
        "test_constantofshape_int_zeros",
        "test_range_float_type_positive_delta",
    }
)


class TunerRep(BackendRep):
    """A model behind the backend interface: positional inputs in graph order.

    ONNX's node tests feed operator parameters (Reshape's shape, Slice's
    starts, Reduce*'s axes, Pad's pads, Range's bounds) as runtime inputs;
    this compiler, like TVM, takes them only as compile-time constants. The
    rep therefore compiles at the first ``run``, with every input that feeds
    such a parameter bound to its value as an initializer (TVM's frontend
    tests "freeze params" the same way); the rest stay runtime inputs.
    """

    def __init__(self, model: onnx.ModelProto, input_names: Sequence[str]):
        self.model = model
        self.input_names = list(input_names)
        self.params = _parameter_inputs(model)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            feeds = {n: np.asarray(a) for n, a in inputs.items()}
        else:
            feeds = {n: np.asarray(a) for n, a in zip(self.input_names, inputs, strict=True)}
        frozen = {n: feeds.pop(n) for n in list(feeds) if n in self.params}
        module = compile_model(_freeze(self.model, frozen))
        return tuple(module.run(feeds))


def _parameter_inputs(model: onnx.ModelProto) -> set[str]:
    """Graph inputs that what an operator needs as a compile-time constant is computed from.

    From each such operand (Reshape's shape, Pad's pads, a SHAPE operator's
    inputs) back through the nodes that compute it; a Shape node needs only
    its input's shape, so the walk stops there.
    """
    from tuner.graph.ops import OpKind, opdef

    producers = {out: node for node in model.graph.node for out in node.output}
    graph_inputs = {i.name for i in model.graph.input}
    needed: list[str] = []
    for node in model.graph.node:
        try:
            d = opdef(node.op_type)
        except ValueError:
            continue
        positions = range(len(node.input)) if d.kind is OpKind.SHAPE else d.const_inputs
        needed.extend(node.input[k] for k in positions if k < len(node.input) and node.input[k])
    seen: set[str] = set()
    while needed:
        name = needed.pop()
        if name in seen:
            continue
        seen.add(name)
        node = producers.get(name)
        if node is not None and node.op_type != "Shape":
            needed.extend(i for i in node.input if i)
    return seen & graph_inputs


def _freeze(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    if not values:
        return model
    frozen = onnx.ModelProto()
    frozen.CopyFrom(model)
    kept = [i for i in frozen.graph.input if i.name not in values]
    del frozen.graph.input[:]
    frozen.graph.input.extend(kept)
    frozen.graph.initializer.extend(
        onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in values.items()
    )
    return frozen


class TunerBackend(Backend):
    """``onnx.backend`` adapter: ``prepare`` checks the model; the rep compiles it with
    ``tuner.compile_model`` (default schedules, CPU) at its first run."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> TunerRep:
        onnx.checker.check_model(model)
        stamped = at_max_opset(model)
        if stamped is None:
            raise unittest.SkipTest(f"an operator of this model changed after opset {MAX_OPSET}")
        model = stamped
        inits = {t.name for t in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in inits]
        return TunerRep(model, names)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


def _same_for(node: onnx.NodeProto, old: onnx.defs.OpSchema, new: onnx.defs.OpSchema) -> bool:
    """Whether ``node`` means the same under both schemas: same inputs and outputs, the old
    attributes unchanged in the new one, and none of the new attributes set by the node."""
    if [(i.name, i.option) for i in old.inputs] != [(i.name, i.option) for i in new.inputs]:
        return False
    if [(o.name, o.option) for o in old.outputs] != [(o.name, o.option) for o in new.outputs]:
        return False
    for name, a in old.attributes.items():
        b = new.attributes.get(name)
        if b is None or (a.type, a.required) != (b.type, b.required):
            return False
        if a.default_value.SerializeToString(
            deterministic=True
        ) != b.default_value.SerializeToString(deterministic=True):
            return False
    return all(a.name in old.attributes for a in node.attribute)


def at_max_opset(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The model stamped down to :data:`MAX_OPSET` where that changes nothing but types; None if not.

    ONNX regenerates many cases at its newest opset although the operator only
    gained element types since 21 (bfloat16, float8, 4-bit); those cases are
    stamped down when every node's schema at 21 has the same inputs and outputs
    as at the model's opset, the same attributes with the same defaults, and the
    node sets none of the attributes added since (Cast's ``round_mode``: float8 only).
    Models at most at 21 come back unchanged.
    """
    version = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if version is None or version <= MAX_OPSET:
        return model
    for node in model.graph.node:
        try:
            old = onnx.defs.get_schema(node.op_type, MAX_OPSET)
            new = onnx.defs.get_schema(node.op_type, version)
        except onnx.defs.SchemaError:
            return None
        if old.since_version != new.since_version and not _same_for(node, old, new):
            return None
    stamped = onnx.ModelProto()
    stamped.CopyFrom(model)
    for o in stamped.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = MAX_OPSET
    return stamped


def _tensor_types(model: onnx.ModelProto) -> list[tuple[str, onnx.TypeProto]]:
    graph = model.graph
    infos = [*graph.input, *graph.output, *graph.value_info]
    return [(v.name, v.type) for v in infos]


def why_not(case: TestCase, ops: frozenset[str]) -> str | None:
    """Why the compiler is not meant to take this node case (None: it is)."""
    model = case.model
    if model is None or case.data_sets is None:
        return "no in-memory model"
    if model.functions:
        return "local functions"
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if any(o.domain not in ("", "ai.onnx") for o in model.opset_import):
        return "non-default domain"
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ops:
            return f"operator {node.op_type}"
    stamped = at_max_opset(model)
    if stamped is None:
        return f"opset {versions[0]}: an operator changed after {MAX_OPSET}"
    for t in model.graph.initializer:
        if t.data_type not in TE_DTYPES or 0 in t.dims:
            return f"initializer {t.name}"
    try:
        inferred = onnx.shape_inference.infer_shapes(stamped, strict_mode=True)
    except onnx.shape_inference.InferenceError:
        return "ONNX's shape inference fails at the stamped opset"
    for name, type_ in _tensor_types(inferred):
        if not type_.HasField("tensor_type"):
            return f"{name} is not a tensor"
        tt = type_.tensor_type
        if tt.elem_type not in TE_DTYPES:
            return f"{name} has element type {TensorProto.DataType.Name(tt.elem_type)}"
        if any(d.HasField("dim_value") and d.dim_value == 0 for d in tt.shape.dim):
            return f"{name} has a zero-size dimension"
    for inputs, outputs in case.data_sets:
        for a in [*inputs, *outputs]:
            if isinstance(a, np.ndarray) and a.size == 0:
                return "zero-size data"
    return None


def select(cases: Sequence[TestCase], ops: frozenset[str]) -> list[str]:
    """Names (without the ``_cpu`` suffix) of the cases to run, sorted."""
    excluded = [re.compile(p) for p, _ in EXCLUDE]
    names = []
    for case in cases:
        if any(p.search(case.name) for p in excluded):
            continue
        if why_not(case, ops) is None:
            names.append(case.name)
    return sorted(names)


def _node_cases() -> list[TestCase]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ONNX's generators overflow casts on purpose
        return list(onnx.backend.test.loader.load_model_tests(kind="node"))


SELECTED = select(_node_cases(), frozenset(supported()))

backend_test = onnx.backend.test.BackendTest(
    TunerBackend, __name__, test_kwargs={name: {"atol": ATOL} for name in SELECTED}
)
if SELECTED:
    backend_test.include("^(" + "|".join(re.escape(n) for n in SELECTED) + ")_cpu$")
else:
    backend_test.include("^$")
for pattern, _why in EXCLUDE:
    backend_test.exclude(pattern)
# Kept as plain functions: a TestCase class at module level would be collected whole.
_CASES = backend_test.test_cases["OnnxBackendNodeModelTest"]  # a property: computed once here
_RUN = {n: getattr(_CASES, f"{n}_cpu") for n in SELECTED}
del _CASES


def test_the_selection_is_not_empty() -> None:
    assert SELECTED, "no ONNX node case uses only supported operators"
    assert len(FAST & set(SELECTED)) >= min(10, len(SELECTED))


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in SELECTED]
)
def test_node(name: str) -> None:
    """One ONNX node case: compile, run every data set, compare (rtol 1e-3, atol ATOL)."""
    try:
        _RUN[name](None)
    except unittest.SkipTest as exc:  # an EXCLUDE pattern or the device check
        pytest.skip(str(exc))
