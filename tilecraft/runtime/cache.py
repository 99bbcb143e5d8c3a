"""The cache directory, trusted for nothing: private, owned by this user, written atomically.

Everything tilecraft keeps under `Settings.cache_dir` (generated modules, the tuning
database, the cost model, LLM replies) goes through here. Directories are made 0700 and
files 0600 whatever the umask, a directory owned by another user is refused, and a
directory that cannot be used is replaced, for this process only, by a private temporary
one (one `CacheWarning` says why), so a broken cache never stops a kernel.
"""

from __future__ import annotations

import atexit
import hashlib
import linecache
import os
import shutil
import stat
import tempfile
import threading
import warnings
from contextlib import suppress
from pathlib import Path

from tilecraft.exc import CacheDirError, TilecraftError

DIR_MODE = 0o700
FILE_MODE = 0o600

NOWHERE = Path("/dev/null/tilecraft")  # under a device: no directory can be made here
_lock = threading.Lock()
_fallbacks: dict[Path, Path] = {}  # unusable cache dir -> this process's private stand-in
_warned: set[Path] = set()  # cache dirs whose trouble was reported


class CacheWarning(UserWarning):
    """The cache directory (or a file in it) could not be used as it is; work goes on."""


def digest(text: str) -> str:
    """The SHA-256 of `text` (UTF-8), in hex."""
    return hashlib.sha256(text.encode()).hexdigest()


def private_dir(path: Path | str) -> Path:
    """`path` made (with parents) as a directory only this user can use: 0700, owned by us.

    Raises `CacheDirError` when it belongs to another user and OSError when it cannot
    be made; `usable_dir` turns both into a private stand-in.
    """
    path = Path(path)
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    except FileExistsError:
        raise CacheDirError(f"cache path {path} exists and is not a directory") from None
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        info = path.stat()
    if info.st_uid != os.getuid():
        raise CacheDirError(
            f"cache directory {path} belongs to another user (uid {info.st_uid}); tilecraft "
            "runs code it finds there, so it refuses it: set TILECRAFT_CACHE_DIR to a "
            "directory of your own"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, DIR_MODE)  # ours, but others could plant files: close it
    if not os.access(path, os.W_OK | os.X_OK):
        raise OSError(f"{path} is not writable")
    return path


def usable_dir(path: Path | str) -> Path:
    """`private_dir(path)`, or, when it cannot be used, this process's private temporary
    directory in its place (said once per directory with a `CacheWarning`)."""
    path = Path(path)
    with _lock:
        stand_in = _fallbacks.get(path)
    if stand_in is not None:
        return stand_in
    try:
        return private_dir(path)
    except (OSError, CacheDirError) as e:
        return _stand_in(path, e, path)


def _stand_in(path: Path, why: Exception, cache_dir: Path) -> Path:
    """The stand-in for `path`; the first for a cache dir says why, the rest are silent."""
    with _lock:
        if path not in _fallbacks:
            _fallbacks[path] = _private_temp()
            if cache_dir in _warned:
                return _fallbacks[path]
            _warned.add(cache_dir)
            reason = why.message if isinstance(why, TilecraftError) else str(why)
            warnings.warn(
                f"tilecraft: cache directory {path} cannot be used ({reason}); this process "
                "keeps its generated code, tuning results and models in memory only",
                CacheWarning,
                stacklevel=4,
            )
        return _fallbacks[path]


def _private_temp() -> Path:
    """A private temporary directory removed at exit; where none can be made (a full
    disk), a path no file can ever be written under, so that everything stays in memory."""
    try:
        made = Path(tempfile.mkdtemp(prefix="tilecraft-cache-"))  # 0700 by mkdtemp
    except OSError:
        return NOWHERE
    atexit.register(shutil.rmtree, made, True)
    return made


def subdir(cache_dir: Path | str, name: str) -> Path:
    """The private directory `name` under the (usable) cache directory."""
    root = usable_dir(cache_dir)
    try:
        return private_dir(root / name)
    except (OSError, CacheDirError) as e:
        return _stand_in(root / name, e, Path(cache_dir))


def write_private(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` atomically (readers see the old file or the new one) as a
    0600 file; raises OSError when the disk refuses."""
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:  # mkstemp made it 0600, whatever the umask
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def holds(path: Path, data: str) -> bool:
    """Whether `path` is a private regular file of ours holding exactly `data`."""
    try:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            return False
        if stat.S_IMODE(info.st_mode) & 0o077:
            return False
        return path.read_bytes() == data.encode()
    except OSError:
        return False


def write_module(cache_dir: Path | str, name: str, code: str) -> Path:
    """The file `code/<name>` holding exactly `code`: kept if it does, (re)written if not.

    A module that differs from what tilecraft generates (edited or planted) is replaced
    with a warning. When no file can be written the path is returned all the same: this
    process runs the code from memory (`remember_source`), and a worker that finds no
    such file fails that candidate alone.
    """
    path = subdir(cache_dir, "code") / name
    if holds(path, code):
        return path
    if _differs(path, code):  # not merely loose permissions from an older tilecraft
        warnings.warn(
            f"tilecraft: generated module {path} differs from the code tilecraft writes;"
            " replaced it",
            CacheWarning,
            stacklevel=4,
        )
    try:
        write_private(path, code)
    except OSError as e:
        path = _stand_in(path.parent, e, Path(cache_dir)) / name
        with suppress(OSError):
            write_private(path, code)
    return path


def _differs(path: Path, data: str) -> bool:
    """Whether something other than `data` is at `path` (a link, a folder, other text)."""
    if path.is_symlink():
        return True
    try:
        return path.read_bytes() != data.encode()
    except FileNotFoundError:
        return False
    except OSError:
        return True


def remember_source(path: Path, code: str) -> None:
    """Make `code` the source that `inspect` (and so Triton) reads for `path`, whatever
    the file on disk holds later: an entry without a time stamp is never re-read."""
    linecache.cache[str(path)] = (len(code), None, code.splitlines(True), str(path))
