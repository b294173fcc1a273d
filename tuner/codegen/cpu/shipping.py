"""A CPU kernel's machine code as files to ship, and their checked install into a cache.

A kernel's machine code lives in Numba's disk cache beside its module:
``__pycache__/<module>.<function>-<line>.py311.nbi`` (an index) and
``.nbc`` files (the object code with the types it was compiled for), all
pickles. Shipping them lets a process on the same hardware load the kernel
without compiling it (``tuner.model.artifact``).

Unpickling calls whatever the stream names, so a shipped file is read first
with every global it names replaced by an inert stand-in (nothing is
imported or called): each must be one of the few Numba classes and functions
a kernel's cache is made of, and the one that imports a module
(``_rebuild_env``) must name the kernel's own module or one of Numba's. Only then is the file
written into the cache, and only where the cache has no such file yet.

The kernel's module (its Python source) is never shipped: the loader
generates it again from the records, and Numba uses an installed index only
when its stamp (the SHA-256 of the module's source) is that of the source
generated here, so a kernel whose source would differ compiles instead.
"""

from __future__ import annotations

import io
import os
import pickle
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..backend import cache_dir

__all__ = ["CacheFileError", "cached_files", "check_cache_file", "install_files"]

#: The globals a kernel's cache files name, outside Numba's type classes.
_ALLOWED = frozenset(
    {
        ("builtins", "object"),
        ("copyreg", "_reconstructor"),
        ("numba.core.environment", "_rebuild_env"),
        ("numba.core.funcdesc", "PythonFunctionDescriptor"),
        ("numba.core.types.abstract", "_type_reconstructor"),
        ("numba.core.typing.templates", "Signature"),
    }
)
#: Numba's type classes (Array, Float, Integer, NoneType, UniTuple...) live here.
_TYPES = "numba.core.types."
_MODULE = re.compile(r"k_[0-9a-f]{20}")
_FILE = re.compile(r"(k_[0-9a-f]{20})\.[A-Za-z_][A-Za-z0-9_]*-\d+\.py\d+(\.\d+\.nbc|\.nbi)")


class CacheFileError(ValueError):
    """A shipped cache file that is not what a kernel's cache is made of (one line)."""


def cached_files(module: str) -> dict[str, bytes]:
    """The cache files of kernel module ``module`` in this machine's kernel cache, by name."""
    if not _MODULE.fullmatch(module):
        return {}
    folder = cache_dir() / "__pycache__"
    out = {}
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return {}
    for name in names:
        m = _FILE.fullmatch(name)
        if m and m.group(1) == module:
            try:
                out[name] = (folder / name).read_bytes()
            except OSError:
                continue
    return out


def check_cache_file(module: str, name: str, data: bytes) -> None:
    """Raise ``CacheFileError`` unless ``data`` is a cache file of kernel ``module``."""
    m = _FILE.fullmatch(name)
    if m is None or m.group(1) != module:
        raise CacheFileError(f"{name!r} is not a cache file of kernel {module}")
    stream = io.BytesIO(data)
    try:
        if name.endswith(".nbi"):  # the Numba version, then (source stamp, overloads)
            version = _Inert(stream, module).load()
            if not isinstance(version, str):
                raise CacheFileError(f"{name}: no Numba version at its start")
        _Inert(stream, module).load()
    except CacheFileError:
        raise
    except Exception as exc:  # a damaged stream: pickle's own errors are many kinds
        raise CacheFileError(f"{name} is not a readable cache file ({exc})") from None
    if stream.read(1):
        raise CacheFileError(f"{name} has data after its end")


def install_files(kernels: Sequence[tuple[str, Mapping[str, bytes]]]) -> int:
    """Check every kernel's files (module name, files by name), then write those the cache
    lacks; returns how many were written. A ``CacheFileError`` for any file that fails the
    check, before anything is written."""
    for module, files in kernels:
        for name, data in files.items():
            check_cache_file(module, name, data)
    folder = cache_dir() / "__pycache__"
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for _, files in kernels:
        for name, data in files.items():
            path = folder / name
            if path.exists():  # this machine's own copy (or an earlier install) stays
                continue
            tmp = path.with_name(f"{name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            written += 1
    return written


def _numba_type(module: str, name: str) -> bool:
    """Whether ``module.name`` is one of Numba's type classes (its module already imported)."""
    import sys

    from numba.core.types import Type

    found = getattr(sys.modules.get(module), name, None) if module.startswith(_TYPES) else None
    return isinstance(found, type) and issubclass(found, Type)


class _Stand:
    """What an allowed global becomes while a file is checked: it records, and does nothing."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _Stand:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _Inert(pickle.Unpickler):
    """An unpickler that resolves no global: each allowed one is a fresh ``_Stand`` class."""

    def __init__(self, stream: io.BytesIO, module: str):
        super().__init__(stream)
        self.module = module

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED and not _numba_type(module, name):
            raise CacheFileError(
                f"a cache file names {module}.{name}, which no kernel's cache does"
            )
        if (module, name) == ("numba.core.environment", "_rebuild_env"):
            return self._rebuild_env
        return type(name, (_Stand,), {})

    def _rebuild_env(self, modname: Any = None, *args: Any) -> _Stand:
        numba_own = isinstance(modname, str) and re.fullmatch(r"numba(\.\w+)+", modname)
        if modname != self.module and not numba_own:
            raise CacheFileError(f"a cache file of kernel {self.module} imports {modname!r}")
        return _Stand()

    def persistent_load(self, pid: Any) -> Any:
        raise CacheFileError("a cache file refers to a persistent object")
