"""A compiled model as one file to ship: ``Module.save(path)`` and ``load(path)``.

>>> tuner.compile_model("resnet50.onnx", log="tune.jsonl").save("resnet50.tpk")
>>> mod = tuner.load("resnet50.tpk")     # on a machine of the same kind: nothing compiles
>>> outs = mod.run({"data": x})

The file is a zip archive of:

- ``manifest.json``: the lowered model (its kernels' tasks in order, views,
  value types; ``Lowered.to_meta``), the target it was compiled for (kind,
  hardware fingerprint, threads), the compiler's code fingerprint, the source
  model's path and SHA-256, and the SHA-256 of every other member;
- ``consts.npz``: the constants after the graph passes (pre-packed weights);
- ``records.jsonl``: the tuning records the kernels were built from;
- ``code/``: each kernel's machine code as its backend caches it (Numba's
  index and object-code files on a CPU).

Loading checks the archive's members against the manifest's hashes and the
manifest against the hash in the archive's comment (a damaged or edited file
is refused in one line; this detects changes, it does not authenticate a
maker). On hardware of the same fingerprint, with the same compiler code, the
kernels' code files are checked (``Backend.install_code``) and placed in the
kernel cache; the kernels are then built from the records as usual and each
finds its machine code there, so nothing compiles. Elsewhere a warning says
why, and the kernels compile from the records the file carries.

Nothing in the file is executed but the kernels' machine code: the manifest
is JSON, the constants load with ``allow_pickle=False``, the kernels' Python
source is generated again here (never read from the file), and a code file
installs only after an inert read of it finds nothing but what a kernel's
cache holds.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..codegen.backend import get_backend
from ..codegen.index import code_fingerprint
from ..target import Target
from .lowered import Lowered, read_consts, write_consts

if TYPE_CHECKING:
    from .module import Module

__all__ = ["ArtifactError", "ArtifactWarning", "load", "save"]

_KIND = "tuner compiled model"
_FORMAT = 1
_COMMENT = b"tuner compiled model; manifest sha256 "


class ArtifactError(ValueError):
    """A file that is not a compiled model this version can load, or a module it cannot save."""


class ArtifactWarning(UserWarning):
    """Loading a compiled model compiles its kernels (another machine, another compiler)."""


def save(module: Module, path: str | os.PathLike[str]) -> Path:
    """Write ``module`` (compiled for one set of input shapes) as one file at ``path``."""
    plans = module.plans
    if module.dynamic != "specialize" or len(plans) != 1 or module.symbols:
        raise ArtifactError(
            "save takes a module compiled for one set of input shapes (give symbolic"
            " dimensions with shapes=); this one has "
            + (f"{len(plans)} plans" if len(plans) != 1 else f"dynamic={module.dynamic!r}")
        )
    plan = plans[0]
    meta, consts = plan.lowered.to_meta()
    members: dict[str, bytes] = {}
    buf = io.BytesIO()
    write_consts(buf, meta["consts"], consts)
    members["consts.npz"] = buf.getvalue()
    chosen: dict[str, None] = {}
    for k in plan.kernels:
        if k.record is not None:
            chosen[json.dumps(k.record.to_json(), sort_keys=True)] = None
    members["records.jsonl"] = "".join(f"{line}\n" for line in chosen).encode()
    backend = get_backend(module.target)
    kernels = []
    for spec, k in plan.distinct():
        shipped = backend.export_code(k.kernel)
        entry, files = shipped if shipped is not None else ({}, {})
        for name, data in files.items():
            members[f"code/{name}"] = data
        kernels.append({"task": spec.task.key, "code": entry, "files": sorted(files)})
    manifest = {
        "kind": _KIND,
        "format": _FORMAT,
        "code": code_fingerprint(),
        "target": module.target.to_json(),
        "threads": module.target.threads,
        "fuse": module.fuse,
        "source": _source(module),
        "lowered": meta,
        "kernels": kernels,
        "members": {name: _sha(data) for name, data in members.items()},
    }
    text = json.dumps(manifest).encode()
    out = Path(path)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w") as zf:
            zf.comment = _COMMENT + _sha(text).encode()
            zf.writestr("manifest.json", text, zipfile.ZIP_DEFLATED)
            for name, data in members.items():
                how = zipfile.ZIP_STORED if name == "consts.npz" else zipfile.ZIP_DEFLATED
                zf.writestr(name, data, how)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def load(path: str | os.PathLike[str], *, threads: int | None = None) -> Module:
    """The module saved at ``path``, its kernels built (from the file's code where it serves).

    ``threads``: run with this many threads instead of the count it was compiled
    for (its kernels then compile, as they were scheduled for that count).
    Raises ``ArtifactError`` (one line) for a file that is not a compiled model,
    is damaged or edited, or was written by another format.
    """
    from ..kernels import BestRecords
    from .module import Module

    manifest, members = _read(Path(path))
    try:
        made_for = Target.from_json(manifest["target"])
        target = Target.from_name(made_for.kind).with_threads(int(threads or manifest["threads"]))
        consts = read_consts(io.BytesIO(members["consts.npz"]), manifest["lowered"]["consts"])
        lowered = Lowered.from_meta(manifest["lowered"], consts, target)
        records = _records(members["records.jsonl"])
        kernels = list(manifest["kernels"])
        fuse = bool(manifest["fuse"])
        listed = {"consts.npz", "records.jsonl"} | {
            f"code/{n}" for k in kernels for n in k["files"]
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"{path} is not a compiled model this version reads ({exc})") from None
    if set(members) != listed:
        odd = sorted(set(members) ^ listed)[0]
        raise ArtifactError(f"{path} was modified: member {odd!r} belongs to no part of the model")
    why = _why_compile(manifest, made_for, target)
    if why is None:
        shipped = [(k["code"], {n: members[f"code/{n}"] for n in k["files"]}) for k in kernels]
        try:
            get_backend(target).install_code([(e, f) for e, f in shipped if f])
        except ValueError as exc:
            raise ArtifactError(f"{path}: {exc}; the file is refused") from None
    else:
        warnings.warn(f"{path}: {why}; its kernels compile here", ArtifactWarning, stacklevel=2)
    chosen = BestRecords.of(records) if records else None
    mod = Module(
        Path(path), lowered.values, lowered.inputs, lowered.outputs, target, chosen, fuse, lowered
    )
    mod.source_model = manifest.get("source")
    compiled = mod.plans[0].compiled
    if why is None and compiled:
        warnings.warn(
            f"{path}: {compiled} of {len(kernels)} kernels compiled here (their code in the"
            " file did not serve this machine's compiler)",
            ArtifactWarning,
            stacklevel=2,
        )
    return mod


def _read(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and every other member, each checked against its hash."""
    try:
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise ArtifactError(f"{path} does not exist") from None
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ArtifactError(f"{path} is not a compiled model (not a zip archive: {exc})") from None
    with zf:
        comment = zf.comment
        names = zf.namelist()
        try:
            data = {name: zf.read(name) for name in names}
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, RuntimeError) as exc:
            # (a damaged deflate stream is zlib's error; a damaged stored one, a bad CRC)
            raise ArtifactError(f"{path} was modified or damaged ({exc})") from None
    text = data.pop("manifest.json", None)
    if text is None or not comment.startswith(_COMMENT):
        raise ArtifactError(f"{path} is not a compiled model (no tuner manifest)")
    if _sha(text) != comment[len(_COMMENT) :].decode("ascii", "replace"):
        raise ArtifactError(f"{path} was modified or damaged: its manifest does not match its hash")
    try:
        manifest = json.loads(text)
        if manifest.get("kind") != _KIND:
            raise ValueError("not a tuner manifest")
        expected: Mapping[str, str] = manifest["members"]
    except (ValueError, AttributeError, KeyError, TypeError):
        raise ArtifactError(
            f"{path} is not a compiled model (its manifest is unreadable)"
        ) from None
    if manifest.get("format") != _FORMAT:
        raise ArtifactError(
            f"{path} is a compiled model of format {manifest.get('format')!r}; this version"
            f" reads format {_FORMAT}: compile the model again"
        )
    if len(names) != len(set(names)) or set(data) != set(expected):
        extra = sorted(set(data) ^ set(expected)) or ["a duplicated member"]
        raise ArtifactError(f"{path} was modified or damaged: member {extra[0]!r} is not as listed")
    for name, blob in data.items():
        if _sha(blob) != expected[name]:
            raise ArtifactError(f"{path} was modified or damaged: {name} does not match its hash")
    return manifest, data


def _why_compile(manifest: Mapping[str, Any], made_for: Target, target: Target) -> str | None:
    """Why the file's machine code cannot serve here (None: it can)."""
    if made_for.fingerprint != target.fingerprint:
        return (
            f"compiled for other hardware ({made_for.fingerprint[:12]}; this machine is"
            f" {target.fingerprint[:12]})"
        )
    if target.threads != int(manifest["threads"]):
        return f"compiled for {manifest['threads']} threads, run with {target.threads}"
    if manifest.get("code") != code_fingerprint():
        return "compiled by another version of the tuner"
    return None


def _records(data: bytes) -> list[Any]:
    from records import Record

    return [Record.from_json(json.loads(line)) for line in data.splitlines() if line.strip()]


def _source(module: Module) -> dict[str, str] | None:
    """The source model's absolute path and SHA-256, when it was compiled from a file."""
    src = module.source_model if isinstance(module.source_model, dict) else None
    if src is not None:
        return src
    path = module._source
    if not isinstance(path, str | os.PathLike):
        return None
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    return {"path": str(Path(path).resolve()), "sha256": _sha(data)}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
