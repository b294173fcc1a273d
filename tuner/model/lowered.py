"""A model lowered to kernels: what a compiled module is made of, and its on-disk cache.

:class:`Lowered` is the model after import, passes, fusion and task
extraction: the tasks in order with the values they read and write, the
views between values, and every value's type (constants with their data).
The module builds kernels and plans buffers from it. It is also what a
second ``compile_model`` of the same file reads back instead of importing
the model again (``load`` / ``save``, JSON and an ``.npz`` of constants
beside the kernel cache): importing onnx alone costs over a second here,
and a ResNet-50's passes most of another. Nothing in the cache is executed:
the JSON is data, the arrays load with ``allow_pickle=False``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..codegen import cache_dir
from ..codegen.index import code_fingerprint
from ..graph.ir import FUSED, Graph, GraphError, Value
from ..graph.ops import OpKind, opdef
from ..target import Target
from ..task import Task
from ..workload import Workload
from .plan import BASE_ALIGN, aligned_array
from .tasks import KernelSpec, extract

__all__ = ["Lowered", "cache_key", "external_files", "read_consts", "write_consts"]

_FORMAT = 1


@dataclass(frozen=True)
class Lowered:
    """A model's kernels in order, its views, and the types (and constants) of its values."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    specs: tuple[KernelSpec, ...]
    #: (view, the value it views): a Reshape, Flatten, Squeeze... left as an alias.
    views: tuple[tuple[str, str], ...]
    values: Mapping[str, Value]

    @classmethod
    def from_graph(
        cls, graph: Graph, target: Target, fuse: bool, layout: bool = True, inline: bool = True
    ) -> Lowered:
        """The graph optimized, laid out (``layout``: channels-last on a target with SIMD
        vectors, ``tuner.graph.layout``), fused and made into kernels. ``inline``: small
        constants are literals of the kernels that read them (``fusion.SMALL_CONST``); the
        shape-generic mode turns it off, since a constant computed from the shape (indices
        of a padding mask) is small at one shape and not at another, and every shape must
        lower to the same kernels."""
        from ..graph.fusion import SMALL_CONST
        from ..graph.fusion import fuse as fuse_graph
        from ..graph.layout import channels_last
        from ..graph.moves import integer_moves
        from ..graph.ops.lookup import LOOKUP
        from ..graph.padding import explicit_padding
        from ..graph.passes import optimize
        from ..graph.quantized import integer_linear
        from ..graph.tables import tabulate

        g = integer_moves(_static_shapes(graph))  # movement between equal quantizers on integers
        if layout and int(target.get("int8_dot_bits", 0)):
            g = integer_linear(g)  # before the weights fold to float32
        g = optimize(g)
        if layout:  # a GPU records no SIMD lanes: one, and the pass leaves the graph alone
            g = channels_last(g, int(target.get("vector_lanes", 1)))
        g = explicit_padding(g)  # a convolution padded (0, 3) finds its template too
        g = tabulate(g)  # activations between quantizers: one table read per element
        alone = frozenset({LOOKUP}) if target.table_lookup_bits else frozenset()
        g = fuse_graph(g, enabled=fuse, small_const=SMALL_CONST if inline else 0, alone=alone)
        views = []
        for node in g.nodes:
            if node.op == FUSED:
                continue
            if opdef(node.op).kind is not OpKind.VIEW:
                raise GraphError(f"{node.describe()} is left after fusion; it needs a kernel")
            if any(node.outputs[1:]):
                raise GraphError(f"{node.describe()}: only its first output is supported")
            views.append((node.outputs[0], node.inputs[0]))
        specs, consts, new_values = extract(g, target, layout)
        values = {**g.values, **new_values}
        for name, data in consts.items():
            values[name] = Value(name, values[name].dtype, values[name].shape, data)
        return cls(g.name, g.inputs, g.outputs, tuple(specs), tuple(views), values)

    def interned(self, table: dict[tuple[str, str, tuple[int, ...]], list[np.ndarray]]) -> Lowered:
        """The lowering with each constant's data taken from ``table`` where an equal array of
        its name is there (and put there where not: as it is where it is an array of its own,
        C-contiguous, writable and on a cache line, else as such a copy).

        A model served at many shapes lowers once per shape, each import bringing its own
        copy of the weights; sharing one table, its plans share one copy. Equal means the
        same name, dtype, shape and values (a constant the passes folded from a shape is
        kept apart); the first plan only copies. An encoder of four BERT-base layers at 45
        lengths in ``specialize`` held 18 GiB before: two copies of its 113 MB of weights
        per length.
        """
        values = dict(self.values)
        for name, v in self.values.items():
            if v.data is None:
                continue
            data = np.asarray(v.data)
            same = table.setdefault((name, data.dtype.str, tuple(data.shape)), [])
            shared = next((a for a in same if np.array_equal(a, data)), None)
            if shared is None:
                shared = data
                if not _kept(data):  # one copy, on a cache line
                    shared = aligned_array(data.shape, data.dtype)
                    shared[...] = data
                same.append(shared)
            values[name] = Value(v.name, v.dtype, v.shape, shared)
        return dataclasses.replace(self, values=values)

    # -- as data ---------------------------------------------------------------------

    def to_meta(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The lowering as JSON data, and its constants by the names ``meta["consts"]`` lists."""
        consts = {n: v.data for n, v in self.values.items() if v.data is not None}
        meta = {
            "format": _FORMAT,
            "name": self.name,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "views": [list(v) for v in self.views],
            "values": {n: [v.dtype, list(v.shape)] for n, v in self.values.items()},
            "consts": sorted(consts),
            "specs": [
                {
                    "workload": s.task.workload.to_json(),
                    "inputs": list(s.inputs),
                    "output": s.output,
                    "ops": s.ops,
                    "nodes": list(s.nodes),
                }
                for s in self.specs
            ],
        }
        return meta, consts  # type: ignore[return-value]

    @classmethod
    def from_meta(
        cls, meta: Mapping[str, Any], consts: Mapping[str, np.ndarray], target: Target
    ) -> Lowered:
        """The lowering ``to_meta`` gave ``meta`` and ``consts`` for, its tasks on ``target``.

        Raises ``KeyError``, ``TypeError`` or ``ValueError`` for data that is not one."""
        if meta.get("format") != _FORMAT:
            raise ValueError(f"a lowered model of format {meta.get('format')!r}, not {_FORMAT}")
        values = {
            str(n): Value(str(n), str(dt), tuple(shape), consts.get(n))
            for n, (dt, shape) in meta["values"].items()
        }
        missing = [n for n in meta["consts"] if n not in consts]
        if missing:
            raise ValueError(f"constant {missing[0]!r} is missing")
        specs = tuple(
            KernelSpec(
                Task(Workload.from_json(s["workload"]), target),
                tuple(str(i) for i in s["inputs"]),
                str(s["output"]),
                str(s["ops"]),
                tuple(str(n) for n in s["nodes"]),
            )
            for s in meta["specs"]
        )
        views = tuple((str(a), str(b)) for a, b in meta["views"])
        return cls(
            str(meta["name"]),
            tuple(str(i) for i in meta["inputs"]),
            tuple(str(o) for o in meta["outputs"]),
            specs,
            views,
            values,
        )

    # -- the cache ---------------------------------------------------------------------

    def save(self, key: str, external: list[list[Any]]) -> None:
        folder = _folder(key)
        folder.mkdir(parents=True, exist_ok=True)
        meta, consts = self.to_meta()
        tmp = folder / f"consts.{os.getpid()}.tmp.npz"
        write_consts(tmp, meta["consts"], consts)
        os.replace(tmp, folder / "consts.npz")
        tmp_meta = folder / f"meta.{os.getpid()}.tmp"
        tmp_meta.write_text(json.dumps({**meta, "external": external}))
        os.replace(tmp_meta, folder / "meta.json")  # last: its presence says the entry is whole

    @classmethod
    def load(cls, key: str, source: Any, target: Target) -> Lowered | None:
        """The cached lowering of ``key``, or None (absent, damaged, stale or of another format)."""
        folder = _folder(key)
        try:
            meta = json.loads((folder / "meta.json").read_text())
            if meta.get("format") != _FORMAT or not _externals_unchanged(source, meta["external"]):
                return None
            consts = read_consts(folder / "consts.npz", meta["consts"])
            return cls.from_meta(meta, consts, target)
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _kept(data: np.ndarray) -> bool:
    """Whether a table of constants may keep ``data`` as it is: C-contiguous, writable, on a
    cache line, and either an array of its own (``read_consts`` makes such) or the whole of
    an aligned buffer (``plan.aligned_array`` makes such)."""
    if not (data.flags.c_contiguous and data.flags.writeable):
        return False
    if data.size == 0:  # nothing to read: NumPy may place it anywhere
        return True
    if data.ctypes.data % BASE_ALIGN:
        return False
    return data.base is None or data.base.nbytes <= data.nbytes + BASE_ALIGN


def write_consts(file: Any, names: Sequence[str], consts: Mapping[str, np.ndarray]) -> None:
    """``consts`` in ``names``' order as an ``.npz`` (a path or a binary file)."""
    np.savez(file, **{f"c{k}": consts[n] for k, n in enumerate(names)})  # type: ignore[arg-type]


def read_consts(file: Any, names: Sequence[str]) -> dict[str, np.ndarray]:
    """What ``write_consts`` wrote, by name: arrays of their own, writable (no object dtype).

    Each is read into its own array in slices (``_read_npy``): ``np.load`` of a member
    hands over a read-only view of the member's bytes, which ``Lowered.interned`` then
    copied, a second 100 MB for ResNet-50 (0.27 s of a 1.3 s cached compile, Zen 4).
    A file that is not such an archive, or is cut short, raises ``ValueError``."""
    out = {}
    try:
        with zipfile.ZipFile(file) as z:
            for k, n in enumerate(names):
                with z.open(f"c{k}.npy") as member:
                    out[str(n)] = _read_npy(member)
    except (zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"damaged constants ({exc})") from None
    return out


#: Bytes ``_read_npy`` reads at a time (its transient buffer).
_SLICE = 1 << 20


def _read_npy(f: Any) -> np.ndarray:
    """One ``.npy`` from the binary file ``f``, read into a new array a slice at a time."""
    from numpy.lib import format as npy

    version = npy.read_magic(f)
    header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
    shape, fortran, dtype = header(f)
    if dtype.hasobject:
        raise ValueError("a constant of object dtype")
    # on a cache line, as interning keeps it (``_kept``)
    data = np.empty(shape, dtype, order="F") if fortran else aligned_array(shape, dtype)
    view = memoryview(data.reshape(-1, order="A").view(np.uint8).data)
    for start in range(0, len(view), _SLICE):
        part = view[start : start + _SLICE]
        if f.readinto(part) != len(part):
            raise ValueError("a constant shorter than its header says")
    return data


def _static_shapes(graph: Graph) -> Graph:
    """The graph with every value's shape made concrete, once its inputs' shapes are.

    onnx's shape inference loses extents that flow through shape arithmetic
    it cannot follow (a Reshape to a computed shape, a Split of a computed
    size); with static inputs, running the graph once in NumPy on zeros
    gives every value's extents. Graphs whose values are all static (the
    usual exported CNN or encoder) skip this.
    """
    if all(v.static for v in graph.values.values()):
        return graph
    if not all(graph.values[i].static for i in graph.inputs):
        return graph
    from ..graph.interpret import evaluate_all

    feeds = {
        i: np.zeros(tuple(int(d) for d in graph.values[i].shape), graph.values[i].dtype)
        for i in graph.inputs
    }
    with np.errstate(all="ignore"):
        env = evaluate_all(graph, feeds)
    table = {
        name: v
        if v.static or name not in env
        else Value(name, v.dtype, tuple(env[name].shape), v.data)
        for name, v in graph.values.items()
    }
    return graph.replace(values=table)


def cache_key(
    source: Any, shapes: Mapping[str, Sequence[int] | int] | None, target: Target, fuse: bool
) -> str | None:
    """The cache key of compiling the model file ``source`` so; None for an in-memory model.

    The file's bytes, the given shapes, the target's fingerprint and threads,
    fusion on or off, and the compiler's code. (External data files are
    checked at load, against the sizes and times ``save`` recorded.)
    """
    if not isinstance(source, str | os.PathLike):
        return None
    try:
        h = hashlib.sha256(Path(source).read_bytes())
    except OSError:
        return None
    try:
        given = sorted(
            (str(k), [int(v)] if isinstance(v, int) else [int(d) for d in v])
            for k, v in (shapes or {}).items()
        )
    except (TypeError, ValueError):
        return None  # not shapes at all: the import says what is wrong with them, in one line
    parts = [h.hexdigest(), json.dumps(given), target.fingerprint, str(target.threads)]
    parts += [str(fuse), code_fingerprint()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def external_files(source: Any) -> list[list[Any]]:
    """[name, size, mtime] of each external data file the model file reads."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    path = Path(source)
    model = onnx.load(str(path), load_external_data=False)
    names = sorted(
        {
            entry.value
            for t in _get_all_tensors(model)
            if uses_external_data(t)
            for entry in t.external_data
            if entry.key == "location"
        }
    )
    out = []
    for name in names:
        st = (path.parent / name).stat()
        out.append([name, st.st_size, st.st_mtime_ns])
    return out


def _externals_unchanged(source: Any, recorded: list[list[Any]]) -> bool:
    folder = Path(source).parent
    for name, size, mtime in recorded:
        try:
            st = (folder / str(name)).stat()
        except OSError:
            return False
        if (st.st_size, st.st_mtime_ns) != (size, mtime):
            return False
    return True


def _folder(key: str) -> Path:
    return cache_dir() / "models" / key
