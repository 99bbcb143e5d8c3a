"""Manifests: every tilecraft kernel a model calls, with each specialization it meets.

`record()` watches kernel calls while a model runs one step; the manifest it fills says,
for each kernel (module, qualified name, source fingerprint) and each specialization
(the arguments' dtypes, shapes, strides, device and scalar values), how many calls
there were: enough to rebuild inputs and tune each entry later, on another machine.

Example::

    with tilecraft.record() as manifest:
        model(x)
    manifest.save("manifest.json")
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from tilecraft.exc import TilecraftError
from tilecraft.runtime.bound import spec_key
from tilecraft.runtime.cache import write_private
from tilecraft.runtime.kernel import Kernel

FORMAT = "tilecraft-manifest"
FORMAT_VERSION = 1


class ManifestError(TilecraftError):
    """A manifest cannot be read, or one of its entries cannot be rebuilt here."""


def fingerprint(kernel: Kernel) -> str:
    """The kernel's source fingerprint, the same one the tuning database keys trials by."""
    src = kernel.source
    source = "".join(src.lines[src.tree.lineno - 1 : src.tree.end_lineno])
    return hashlib.sha256(source.encode()).hexdigest()[:20]


def read_json(path: Path | str, kind: str, version: int, what: str) -> dict[str, Any]:
    """A JSON file of ours: a dict whose `format` is `kind` at `version`; a ManifestError
    naming `what` and the problem otherwise."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ManifestError(f"cannot read {what} {path}: {e}") from None
    if not isinstance(data, dict) or data.get("format") != kind:
        raise ManifestError(f"{path} is not a tilecraft {what} file")
    if data.get("version") != version:
        raise ManifestError(f"{path}: {what} version {data.get('version')} is unknown")
    return data


@dataclass
class Entry:
    """One kernel at one specialization, and how often the recorded step called it."""

    module: str
    qualname: str
    file: str
    fingerprint: str
    spec_key: str
    args: list[dict[str, Any]]
    calls: int = 0

    @property
    def ident(self) -> str:
        """A stable name for this entry: kernel, fingerprint and specialization."""
        return f"{self.module}.{self.qualname}@{self.fingerprint[:8]}[{self.spec_key}]"

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entry:
        try:
            return cls(**{k: data[k] for k in cls.__dataclass_fields__})
        except (KeyError, TypeError) as e:
            raise ManifestError(f"a manifest entry lacks a field: {e}") from None


@dataclass
class Manifest:
    """The entries recorded, in the order they were first called."""

    entries: dict[str, Entry] = field(default_factory=dict)

    def add(self, kernel: Kernel, args: tuple) -> None:
        """Count one call of `kernel` with (normalized) `args`."""
        described = [describe_arg(a) for a in args]
        entry = Entry(
            getattr(kernel.fn, "__module__", "") or "",
            getattr(kernel.fn, "__qualname__", kernel.fn.__name__),
            kernel.source.filename,
            fingerprint(kernel),
            spec_key(args),
            described,
        )
        with _lock:  # a model may call kernels from several threads
            entry = self.entries.setdefault(_entry_key(entry), entry)
            entry.calls += 1

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)

    def to_json(self) -> str:
        body = {"format": FORMAT, "version": FORMAT_VERSION, "entries": [e.to_dict() for e in self]}
        return json.dumps(body, indent=1, sort_keys=True)

    def save(self, path: Path | str) -> Path:
        """Write the manifest (atomically) as JSON; return its path."""
        path = Path(path)
        write_private(path, self.to_json() + "\n")
        return path

    @classmethod
    def load(cls, path: Path | str) -> Manifest:
        """Read a manifest written by `save`; a ManifestError says what is wrong with it."""
        data = read_json(path, FORMAT, FORMAT_VERSION, "manifest")
        manifest = cls()
        for raw in data.get("entries", []):
            entry = Entry.from_dict(raw)
            manifest.entries[_entry_key(entry)] = entry
        return manifest


def _entry_key(entry: Entry) -> str:
    """Entries differ by specialization: a float's value is not part of it (the compiled
    kernel takes it as an argument), so calls with other floats count as the same entry."""
    args = [{**a, "value": None} if a.get("type") == "float" else a for a in entry.args]
    return json.dumps([entry.ident, args], sort_keys=True)


def describe_arg(arg: Any) -> dict[str, Any]:
    """What rebuilds an argument: a tensor's metadata, a scalar's value."""
    if isinstance(arg, torch.Tensor):
        return {
            "kind": "tensor",
            "dtype": str(arg.dtype).removeprefix("torch."),
            "shape": list(arg.shape),
            "stride": list(arg.stride()),
            "contiguous": arg.is_contiguous(),
            "device": arg.device.type,
        }
    if arg is None or isinstance(arg, (bool, int, float, str)):
        return {"kind": "scalar", "type": type(arg).__name__, "value": arg}
    if isinstance(arg, torch.dtype):
        return {"kind": "dtype", "value": str(arg).removeprefix("torch.")}
    return {"kind": "unsupported", "type": type(arg).__name__}


# -- recording -------------------------------------------------------------------------
_recording: list[Manifest] = []
_lock = threading.Lock()
_original_run = Kernel.run


def _recording_run(self: Kernel, args: tuple) -> Any:
    """`Kernel.run`, where every call ends (a direct call after normalizing its arguments,
    and the operators' calls, which skip `__call__`), counting the call first."""
    with _lock:
        manifests = list(_recording)
    for manifest in manifests:
        manifest.add(self, args)
    return _original_run(self, args)


@contextmanager
def record() -> Iterator[Manifest]:
    """Record every tilecraft kernel called inside the block into a `Manifest`.

    Example::

        with tilecraft.record() as manifest:
            model(x)
        manifest.save("manifest.json")
    """
    manifest = Manifest()
    with _lock:
        _recording.append(manifest)
        Kernel.run = _recording_run  # type: ignore[method-assign]
    try:
        yield manifest
    finally:
        with _lock:
            _recording.remove(manifest)
            if not _recording:
                Kernel.run = _original_run  # type: ignore[method-assign]


def record_script(script: Path | str, argv: list[str] | None = None) -> Manifest:
    """Run a Python script as `__main__` (with `argv`) under `record()`."""
    import runpy

    path = Path(script)
    if not path.is_file():
        raise ManifestError(f"no script {script}")
    saved = sys.argv, list(sys.path)
    sys.argv = [str(path), *(argv or [])]
    sys.path.insert(0, str(path.resolve().parent))
    try:
        with record() as manifest:
            try:
                runpy.run_path(str(path), run_name="__main__")
            except SystemExit as done:  # a script that ends with sys.exit(0) ran fine
                if done.code not in (None, 0):
                    raise
    finally:
        sys.argv, sys.path[:] = saved
    return manifest


# -- rebuilding --------------------------------------------------------------------------
def resolve(entry: Entry) -> Kernel:
    """The kernel an entry names, imported by module (or loaded from its file when the
    module was a script's `__main__`), checked to have the recorded source."""
    module = _module(entry)
    value: Any = module
    for part in entry.qualname.split("."):
        value = getattr(value, part, None)
        if value is None or part == "<locals>":
            raise ManifestError(
                f"{entry.ident}: no kernel {entry.qualname} in {entry.module} (kernels "
                "defined inside functions cannot be found again: define them at module level)"
            )
    if not isinstance(value, Kernel):
        raise ManifestError(f"{entry.ident}: {entry.qualname} is not a tilecraft kernel")
    if fingerprint(value) != entry.fingerprint:
        raise ManifestError(
            f"{entry.ident}: the source of {entry.qualname} changed since it was recorded;"
            " record the manifest again"
        )
    return value


def _module(entry: Entry) -> Any:
    if entry.module and entry.module != "__main__":
        try:
            return importlib.import_module(entry.module)
        except ImportError as e:
            if not Path(entry.file).is_file():
                raise ManifestError(f"{entry.ident}: cannot import {entry.module}: {e}") from None
    name = f"_tilecraft_manifest_{hashlib.sha256(entry.file.encode()).hexdigest()[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, entry.file)
    if spec is None or spec.loader is None:
        raise ManifestError(f"{entry.ident}: cannot load {entry.file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)  # a script's `if __name__ == "__main__"` stays off
    return module


def build_args(entry: Entry, device: str | torch.device | None = None) -> tuple:
    """Inputs of the recorded metadata on `device` (default: the recorded one): random
    floats, integer and boolean tensors of zeros (always valid as indices)."""
    return tuple(_build(arg, entry, device) for arg in entry.args)


def _build(arg: dict[str, Any], entry: Entry, device: str | torch.device | None) -> Any:
    kind = arg.get("kind")
    if kind == "scalar":
        return arg["value"]
    if kind == "dtype":
        return getattr(torch, arg["value"])
    if kind != "tensor":
        raise ManifestError(
            f"{entry.ident}: an argument of type {arg.get('type')} cannot be rebuilt"
        )
    dtype = getattr(torch, arg["dtype"])
    where = torch.device(device or arg["device"])
    shape, stride = arg["shape"], arg["stride"]
    if dtype.is_floating_point or dtype.is_complex:
        storage = torch.randn(_extent(shape, stride), dtype=dtype, device=where)
    else:
        storage = torch.zeros(_extent(shape, stride), dtype=dtype, device=where)
    return storage.as_strided(shape, stride)


def _extent(shape: list[int], stride: list[int]) -> int:
    """Elements a strided view of `shape` and `stride` reaches (1 + its largest offset)."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
