"""Find the checkpoints under a path and say which are complete, and if not, why not.

Layouts recognised (see shared/research/reliability.md §3):

- **PyTorch DCP / torchtitan**: ``<dir>/step-<N>/`` with shards ``__<rank>_<n>.distcp`` and
  a ``.metadata`` file that rank 0 writes last (``.metadata.tmp`` renamed into place): the
  commit marker. torchtitan puts them in ``<dump_folder>/checkpoint/step-<N>/``. A
  torchtitan HF export (``model.safetensors.index.json`` instead of ``.metadata``) is
  recognised too (format ``safetensors``).
- **Megatron-LM**: ``<save>/iter_<NNNNNNN>/`` (or ``release/``) and the tracker
  ``<save>/latest_checkpointed_iteration.txt``, which rank 0 writes after every rank has
  saved. ``torch_dist`` iterations are DCP directories plus ``common.pt`` and
  ``metadata.json``; legacy ones hold ``mp_rank_<TP>[_<PP>][_<EP>]/model_optim_rng.pt``.
- **One checkpoint directory** given directly (it has ``.metadata``, shards, ``mp_rank_*``
  or is named ``step-N``/``iter_N``).

Other paths are searched a few directory levels down (``SEARCH_DEPTH``), so a torchtitan
dump folder or the simulator's ``<state>/checkpoints`` work as PATH too.

Completeness, per format:

- DCP: ``.metadata`` exists and is readable, and every file it lists exists with at least
  ``offset + length`` bytes for each item stored in it (DCP's own commit protocol and the
  strict check the research note recommends). Without ``.metadata`` the checkpoint is
  incomplete; ``.metadata.tmp`` or a file modified in the last ``WRITING_WINDOW_S`` seconds
  says it is probably still being written rather than crashed.
- Megatron ``torch_dist``: the DCP check, plus ``common.pt`` (a whole zip archive) and
  ``metadata.json`` (JSON), which Megatron needs to load. A complete iteration newer than
  the tracker stays complete, with a note that ``--load`` will not pick it.
- Megatron legacy: every ``mp_rank_*`` directory of the rank grid present, each with a
  whole ``model_optim_rng.pt`` (torch.save writes zip archives; a truncated one has no zip
  end record); an iteration newer than the tracker was not committed.
- safetensors export: every file the index names exists and is as long as its header says.

**How ``.metadata`` is read, and why.** Real DCP pickles a ``Metadata`` object whose
``storage_data`` maps each item to ``_StorageInfo(relative_path, offset, length)``. torch is
not a dependency of this tool, and ``pickle.load`` on a file from a shared filesystem would
run whatever code the file names. So ``.metadata`` is read with a restricted Unpickler that
never imports or calls anything it is given: every global from ``torch``, ``megatron``,
``numpy``, ``pathlib`` or ``collections`` becomes an inert placeholder class that only records
its arguments and state; a handful of builtin containers are allowed as themselves; any
other global (``os.system``, ``builtins.eval``, ...) refuses the file, which is then
reported unreadable. This reads every real DCP ``.metadata`` fully (shard names, offsets,
lengths) without torch, so real checkpoints get the same strict check as the simulator's.
What it cannot verify is the tensor data inside the shards (only that the bytes are there).
The simulator (``krea_ops.sim.machines.training``) writes the same layout with a JSON
``.metadata`` (``{"format": "krea-sim-dcp/1", "storage_data": {file: {"offset", "length"}}}``);
JSON is recognised by its first byte and checked the same way. Unreadable or garbage
metadata makes that checkpoint incomplete with the reason; it never raises. A reason is
one line: control characters in the names it quotes are escaped (``x\\ny``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import re
import stat
import struct
import time
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from krea_ops import units
from krea_ops.errors import BadInput

METADATA = ".metadata"
METADATA_TMP = ".metadata.tmp"
SHARD_SUFFIX = ".distcp"
STEP_DIR = re.compile(r"^step-(\d+)$")
ITER_DIR = re.compile(r"^iter_(\d+)$")
RELEASE_DIR = "release"
MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
MP_RANK_DIR = re.compile(r"^mp_rank_(\d+)(?:_(\d+))?(?:_(\d+))?$")
LEGACY_STATE = "model_optim_rng.pt"
LEGACY_OPTIM = "distrib_optim.pt"
MEGATRON_COMMON = "common.pt"
MEGATRON_CONFIG = "metadata.json"
HF_INDEX = "model.safetensors.index.json"

FORMAT_DCP = "dcp"
FORMAT_MEGATRON_DIST = "megatron-torch_dist"
FORMAT_MEGATRON_LEGACY = "megatron-legacy"
FORMAT_MEGATRON = "megatron"  # an iteration directory with nothing in it yet
FORMAT_SAFETENSORS = "safetensors"

# Shards are rewritten continuously while a save runs; a directory without a commit marker
# that nothing touched for this long is more likely a crash than a save in progress.
WRITING_WINDOW_S = 60.0
MAX_METADATA_BYTES = 512 * 1024**2
SEARCH_DEPTH = 3
MAX_SEARCH_DIRS = 5000
MAX_FILES_PER_CHECKPOINT = 200_000
_MAX_SAFETENSORS_HEADER = 100 * 1024**2


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint directory as found on disk.

    ``mtime`` is the commit time (``.metadata``'s mtime) for a committed DCP checkpoint,
    else the newest file's; ``size_bytes`` adds up every file in it. ``reason`` is None when
    ``complete``, else one sentence saying why not. ``tracker`` is True when Megatron's
    ``latest_checkpointed_iteration.txt`` points at it. ``note`` says what was not verified
    or is worth knowing about a complete one."""

    path: Path
    format: str
    step: int | None
    mtime: float | None
    size_bytes: int | None
    complete: bool
    reason: str | None
    tracker: bool = False
    note: str | None = None


# -- the restricted Unpickler for DCP .metadata ----------------------------------------


class _Refused(Exception):
    """The pickle names a global that DCP metadata never holds."""


class _Placeholder:
    """Stands in for any allowed class: records constructor arguments and state, runs
    nothing of the real class."""

    _global = "?"
    _args: tuple[Any, ...]
    _state: dict[str, Any]
    _raw_state: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> _Placeholder:
        obj = object.__new__(cls)
        obj._args = args
        obj._state = {}
        obj._raw_state = None
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        # dataclasses pickle their __dict__; slotted ones (dict|None, slots dict); some
        # classes (TensorProperties) a tuple of their own making.
        if isinstance(state, dict):
            self._state.update(state)
        elif (
            isinstance(state, tuple)
            and len(state) == 2
            and (state[0] is None or isinstance(state[0], dict))
            and isinstance(state[1], dict)
        ):
            self._state.update(state[0] or {})
            self._state.update(state[1])
        else:
            self._raw_state = state

    def __repr__(self) -> str:
        return f"<{self._global}>"

    def get(self, name: str, index: int) -> Any:
        if name in self._state:
            return self._state[name]
        if len(self._args) > index:
            return self._args[index]
        return None


_PLACEHOLDERS: dict[tuple[str, str], type[_Placeholder]] = {}
_PLACEHOLDER_ROOTS = frozenset({"torch", "megatron", "numpy", "pathlib", "collections"})


def _placeholder(module: str, name: str) -> type[_Placeholder]:
    key = (module, name)
    cls = _PLACEHOLDERS.get(key)
    if cls is None:
        safe_name = re.sub(r"\W", "_", name) or "_"
        cls = type(safe_name, (_Placeholder,), {"_global": f"{module}.{name}"})
        _PLACEHOLDERS[key] = cls
    return cls


def _reconstructor(cls: Any, base: Any, state: Any) -> Any:
    """``copyreg._reconstructor`` (protocols 0-1), for placeholders only."""
    if isinstance(cls, type) and issubclass(cls, _Placeholder):
        obj = cls.__new__(cls)
        obj._args = (state,) if state is not None else ()
        return obj
    raise _Refused("refers to a class outside DCP metadata (not loaded)")


_ALLOWED: dict[tuple[str, str], Any] = {
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "bytearray"): bytearray,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
    ("collections", "OrderedDict"): OrderedDict,
    ("copyreg", "_reconstructor"): _reconstructor,
}


class _DcpMetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED.get((module, name))
        if allowed is not None:
            return allowed
        if module.split(".", 1)[0] in _PLACEHOLDER_ROOTS:
            return _placeholder(module, name)
        raise _Refused(f"refers to {module}.{name}, which DCP metadata never holds (not loaded)")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("holds persistent references (tensor storages), not DCP metadata")


@dataclass(frozen=True)
class _MetadataRead:
    required: dict[str, int] | None  # relative file -> bytes it must have at least
    error: str | None = None
    note: str | None = None


# Control characters (a newline in a shard's name) as escapes: a reason is one line.
_ESCAPES = {c: repr(chr(c))[1:-1] for c in (*range(0x20), 0x7F)}


def _escaped(text: str) -> str:
    return text.translate(_ESCAPES)


def _one_line(text: str | None) -> str | None:
    return None if text is None else _escaped(text)


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def _required_sizes(items: list[tuple[Any, Any, Any]]) -> _MetadataRead:
    required: dict[str, int] = {}
    for rel, offset, length in items:
        if not isinstance(rel, str) or not rel:
            return _MetadataRead(None, f"an item has no file name ({rel!r})")
        if not (isinstance(offset, int) and isinstance(length, int)) or offset < 0 or length < 0:
            return _MetadataRead(None, f"item in {rel} has a bad offset/length")
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            return _MetadataRead(None, f"names a file outside the checkpoint ({rel})")
        required[rel] = max(required.get(rel, 0), offset + length)
    return _MetadataRead(required)


def _read_json_metadata(raw: bytes) -> _MetadataRead:
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # nested too deep
        return _MetadataRead(None, f"not JSON ({_short(exc)})")
    storage = doc.get("storage_data") if isinstance(doc, dict) else None
    if not isinstance(storage, dict):
        return _MetadataRead(None, "JSON without a storage_data map")
    items = []
    for rel, loc in storage.items():
        if not isinstance(loc, dict):
            return _MetadataRead(None, f"storage_data entry for {rel} is not an object")
        items.append((rel, loc.get("offset", 0), loc.get("length", 0)))
    return _required_sizes(items)


def _read_pickled_metadata(raw: bytes) -> _MetadataRead:
    try:
        root = _DcpMetadataUnpickler(io.BytesIO(raw)).load()
    except _Refused as exc:
        return _MetadataRead(None, str(exc))
    except Exception as exc:  # untrusted bytes: a pickle can fail in any way
        return _MetadataRead(None, f"not a readable pickle ({_short(exc)})")
    if not (isinstance(root, _Placeholder) and root._global.endswith(".Metadata")):
        found = root._global if isinstance(root, _Placeholder) else type(root).__name__
        return _MetadataRead(None, f"not a DCP Metadata object (found {found})")
    storage = root.get("storage_data", 2)
    if storage is None:
        return _MetadataRead({}, note="metadata lists no storage_data: shard sizes not verified")
    if not isinstance(storage, dict):
        return _MetadataRead(None, "storage_data is not a mapping")
    items = []
    for info in storage.values():
        if isinstance(info, _Placeholder):
            items.append(
                (info.get("relative_path", 0), info.get("offset", 1), info.get("length", 2))
            )
        else:
            found = type(info).__name__
            return _MetadataRead(None, f"storage_data holds {found}, not _StorageInfo")
    return _required_sizes(items)


def read_dcp_metadata(path: Path) -> _MetadataRead:
    """What a ``.metadata`` file (pickled DCP ``Metadata`` or the simulator's JSON) says
    each file must hold; ``error`` when it cannot be read."""
    try:
        size = path.stat().st_size
        if size == 0:
            return _MetadataRead(None, "empty file (a torn write)")
        if size > MAX_METADATA_BYTES:
            return _MetadataRead(None, f"{size:,} bytes, more than this tool reads")
        raw = path.read_bytes()
    except OSError as exc:
        return _MetadataRead(None, exc.strerror or _short(exc))
    read = _read_json_metadata(raw) if raw.lstrip()[:1] == b"{" else _read_pickled_metadata(raw)
    if read.error is not None:
        return _MetadataRead(None, _one_line(read.error), read.note)
    return read


# -- files of one checkpoint -----------------------------------------------------------


@dataclass(frozen=True)
class _Files:
    sizes: dict[str, int]  # relative posix path -> bytes
    mtimes: dict[str, float]
    dir_mtime: float | None
    error: str | None = None
    truncated: bool = False

    @property
    def newest(self) -> float | None:
        return max(self.mtimes.values(), default=self.dir_mtime)

    @property
    def total(self) -> int | None:
        return None if self.error else sum(self.sizes.values())


def _walk(top: Path) -> _Files:
    sizes: dict[str, int] = {}
    mtimes: dict[str, float] = {}
    try:
        dir_mtime: float | None = top.stat().st_mtime
    except OSError as exc:
        return _Files({}, {}, None, exc.strerror or _short(exc))
    errors: list[OSError] = []
    truncated = False
    for current, dirs, names in os.walk(top, onerror=errors.append):
        dirs.sort()
        for name in names:
            full = Path(current) / name
            try:
                st = full.stat()
            except OSError:
                continue  # a dangling link or a file removed while we looked
            rel = full.relative_to(top).as_posix()
            sizes[rel], mtimes[rel] = st.st_size, st.st_mtime
        if len(sizes) >= MAX_FILES_PER_CHECKPOINT:
            truncated = True
            break
    error = None
    if errors:
        first = errors[0]
        error = f"{first.filename}: {first.strerror or _short(first)}"
    return _Files(sizes, mtimes, dir_mtime, error, truncated)


def _uncommitted(files: _Files, now: float) -> str:
    if METADATA_TMP in files.sizes:
        return f"still being written: {METADATA_TMP} present"
    data = {k: v for k, v in files.mtimes.items() if k != METADATA_TMP}
    newest = max(data.values(), default=None)
    if newest is not None and now - newest < WRITING_WINDOW_S:
        ago = units.age(now - newest)
        return f"still being written: newest file modified {ago} ago, no {METADATA} yet"
    return f"{METADATA} missing (still being written or crashed mid-save)"


def _check_sizes(required: dict[str, int], files: _Files, top: Path) -> str | None:
    problems = []
    for rel in sorted(required):
        need = required[rel]
        have = files.sizes.get(rel)
        if have is None and files.truncated:
            try:
                have = (top / rel).stat().st_size
            except OSError:
                have = None
        if have is None:
            problems.append(f"shard {rel} missing")
        elif have < need:
            problems.append(f"shard {rel} is {have:,} bytes, metadata says at least {need:,}")
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return problems[0] + more


def _check_dcp(top: Path, files: _Files, now: float) -> tuple[str | None, str | None]:
    """``(reason, note)``: reason None when the DCP commit check passes."""
    if METADATA not in files.sizes:
        return _uncommitted(files, now), None
    if METADATA_TMP in files.sizes:
        # finish() writes .metadata.tmp only after every shard: a save over this one is
        # between writing the new metadata and replacing the old, which no longer matches.
        return f"still being written: {METADATA_TMP} present (a save over this checkpoint)", None
    read = read_dcp_metadata(top / METADATA)
    if read.error is not None or read.required is None:
        return f"{METADATA} unreadable: {read.error}", None
    return _check_sizes(read.required, files, top), read.note


def _zip_problem(path: Path, rel: str) -> tuple[str | None, str | None]:
    """``(reason, note)`` for a file torch.save wrote."""
    try:
        size = path.stat().st_size
        if size == 0:
            return f"{rel} is empty", None
        with open(path, "rb") as fh:
            magic = fh.read(2)
        if magic != b"PK":
            return None, f"{rel} is not a zip archive (old torch.save format): not verified"
        if not zipfile.is_zipfile(path):
            return f"{rel} is truncated (no zip end record)", None
    except OSError as exc:
        return f"{rel} unreadable: {exc.strerror or _short(exc)}", None
    return None, None


def _check_megatron_legacy(top: Path) -> tuple[str | None, str | None]:
    try:
        ranks = {
            e.name: m for e in os.scandir(top) if (m := MP_RANK_DIR.match(e.name)) and e.is_dir()
        }
    except OSError as exc:
        return f"unreadable: {exc.strerror or _short(exc)}", None
    if not ranks:
        return "no mp_rank_* directories", None
    # mp_rank_TT[_PPP][_EEE]: every combination up to the largest index must be there.
    width = max(len([g for g in m.groups() if g is not None]) for m in ranks.values())
    highest = [0] * width
    seen = set()
    for m in ranks.values():
        idx = tuple(int(g) for g in m.groups() if g is not None)
        if len(idx) != width:
            return f"mixed rank directory names ({sorted(ranks)[0]} ...)", None
        seen.add(idx)
        highest = [max(a, b) for a, b in zip(highest, idx, strict=True)]
    for idx in _grid(highest):
        if idx not in seen:
            digits = [f"{idx[0]:02d}", *(f"{i:03d}" for i in idx[1:])]
            return f"mp_rank_{'_'.join(digits)} missing", None
    notes = []
    for name in sorted(ranks):
        for fname, required in ((LEGACY_STATE, True), (LEGACY_OPTIM, False)):
            path = top / name / fname
            if not path.exists():
                if required:
                    return f"{name}/{fname} missing", None
                continue
            reason, note = _zip_problem(path, f"{name}/{fname}")
            if reason:
                return reason, None
            if note:
                notes.append(note)
    return None, notes[0] if notes else None


def _grid(highest: list[int]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for top in highest:
        out = [(*prefix, i) for prefix in out for i in range(top + 1)]
    return out


def _check_megatron_dist(top: Path, files: _Files, now: float) -> tuple[str | None, str | None]:
    reason, note = _check_dcp(top, files, now)
    if reason:
        return reason, note
    if MEGATRON_COMMON not in files.sizes:
        return f"{MEGATRON_COMMON} missing (Megatron needs it to load)", None
    reason, zip_note = _zip_problem(top / MEGATRON_COMMON, MEGATRON_COMMON)
    if reason:
        return reason, None
    if MEGATRON_CONFIG not in files.sizes:
        return f"{MEGATRON_CONFIG} missing (Megatron needs it to load)", None
    try:
        json.loads((top / MEGATRON_CONFIG).read_bytes())
    except (OSError, ValueError) as exc:
        return f"{MEGATRON_CONFIG} unreadable: {_short(exc)}", None
    return None, note or zip_note


def _check_safetensors(top: Path, files: _Files) -> tuple[str | None, str | None]:
    try:
        index = json.loads((top / HF_INDEX).read_bytes())
        weight_map = index["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{HF_INDEX} unreadable: {_short(exc)}", None
    for rel in shards:
        if not isinstance(rel, str) or Path(rel).is_absolute() or ".." in Path(rel).parts:
            return f"{HF_INDEX} names a file outside the checkpoint ({rel})", None
        have = files.sizes.get(rel)
        if have is None:
            return f"shard {rel} missing", None
        try:
            with open(top / rel, "rb") as fh:
                head = fh.read(8)
                if len(head) < 8:
                    return f"shard {rel} is {have:,} bytes, too short for a header", None
                (length,) = struct.unpack("<Q", head)
                if length > _MAX_SAFETENSORS_HEADER or 8 + length > have:
                    return f"shard {rel} is {have:,} bytes, its header says more", None
                header = json.loads(fh.read(length))
            end = max(
                (int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"),
                default=0,
            )
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            return f"shard {rel} unreadable: {_short(exc)}", None
        if have < 8 + length + end:
            need = 8 + length + end
            return f"shard {rel} is {have:,} bytes, its header says at least {need:,}", None
    return None, None


# -- one checkpoint --------------------------------------------------------------------


def step_of(name: str) -> int | None:
    """The step (iteration) in a checkpoint directory's name, or None."""
    m = STEP_DIR.match(name) or ITER_DIR.match(name)
    return int(m.group(1)) if m else None


def read_tracker(save_dir: Path) -> int | str | None:
    """Megatron's tracker in ``save_dir``: the iteration, ``"release"``, ``"unreadable"``
    (a torn in-place write), or None when there is no tracker."""
    path = Path(save_dir) / MEGATRON_TRACKER
    try:
        text = path.read_text(errors="replace").strip()
    except FileNotFoundError:
        return None
    except OSError:
        return "unreadable"
    if text == RELEASE_DIR:
        return RELEASE_DIR
    if not (text.isascii() and text.isdigit()):  # "²" is a digit to isdigit(), not to int()
        return "unreadable"
    try:
        return int(text)
    except ValueError:  # past int()'s 4,300 digits
        return "unreadable"


def _is_megatron(top: Path, names: set[str]) -> bool:
    if ITER_DIR.match(top.name) or (top.name == RELEASE_DIR):
        return True
    if MEGATRON_COMMON in names and MEGATRON_CONFIG in names:
        return True
    return any(MP_RANK_DIR.match(n) for n in names)


_UNSET: Any = object()


def inspect_checkpoint(
    path: Path | str, *, now: float | None = None, tracker: int | str | None = _UNSET
) -> Checkpoint:
    """Inspect one checkpoint directory. Never raises: a directory that cannot be read is
    an incomplete checkpoint whose reason says so. ``tracker`` is Megatron's tracker value
    (read from the parent directory when not given)."""
    top = Path(path)
    now = time.time() if now is None else now
    step = step_of(top.name)
    files = _walk(top)
    if files.dir_mtime is None:
        reason = _one_line(f"unreadable: {files.error}")
        return Checkpoint(top, FORMAT_DCP, step, None, None, False, reason)
    top_names = {n for n in files.sizes if "/" not in n}
    with contextlib.suppress(OSError):
        top_names |= {e.name for e in os.scandir(top) if e.is_dir()}
    note: str | None = None
    mtime = files.newest
    on_tracker = False
    if _is_megatron(top, top_names):
        if tracker is _UNSET:
            tracker = read_tracker(top.parent)
        on_tracker = tracker is not None and (
            tracker == step if step is not None else tracker == top.name
        )
        newer = isinstance(tracker, int) and step is not None and step > tracker
        has_dist = (
            METADATA in top_names
            or METADATA_TMP in top_names
            or any(n.endswith(SHARD_SUFFIX) for n in top_names)
        )
        if has_dist:
            fmt = FORMAT_MEGATRON_DIST
            reason, note = _check_megatron_dist(top, files, now)
        elif any(MP_RANK_DIR.match(n) for n in top_names):
            fmt = FORMAT_MEGATRON_LEGACY
            reason, note = _check_megatron_legacy(top)
            if reason is None and newer:
                reason = (
                    f"not committed: {MEGATRON_TRACKER} says {tracker} "
                    "(Megatron writes it after every rank has saved)"
                )
        else:
            fmt = FORMAT_MEGATRON
            reason = "no checkpoint files yet (still being written or crashed mid-save)"
        if reason is None and fmt == FORMAT_MEGATRON_DIST and newer:
            note = f"newer than the tracker ({tracker}): Megatron --load will not pick it"
        if tracker == "unreadable" and note is None:
            note = f"{MEGATRON_TRACKER} unreadable (a torn write?)"
    elif HF_INDEX in top_names and METADATA not in top_names:
        fmt = FORMAT_SAFETENSORS
        reason, note = _check_safetensors(top, files)
    else:
        fmt = FORMAT_DCP
        reason, note = _check_dcp(top, files, now)
    if reason is None and METADATA in files.mtimes:
        mtime = files.mtimes[METADATA]  # the commit time
    if reason is None and files.error:
        reason = f"unreadable: {files.error}"
    if files.truncated and note is None:
        note = f"size counts the first {MAX_FILES_PER_CHECKPOINT:,} files only"
    return Checkpoint(
        path=top,
        format=fmt,
        step=step,
        mtime=mtime,
        size_bytes=None if files.truncated else files.total,
        complete=reason is None,
        reason=_one_line(reason),
        tracker=on_tracker,
        note=_one_line(note),
    )


def checkpoint_complete(path: Path | str) -> bool:
    """Whether the checkpoint directory at ``path`` passes its format's completeness check."""
    return inspect_checkpoint(path).complete


# -- discovery -------------------------------------------------------------------------


def _looks_like_checkpoint(top: Path) -> bool:
    if step_of(top.name) is not None:
        return True
    try:
        with os.scandir(top) as it:
            for entry in it:
                name = entry.name
                if name in (METADATA, METADATA_TMP, HF_INDEX) or name.endswith(SHARD_SUFFIX):
                    return True
                if MP_RANK_DIR.match(name) and entry.is_dir():
                    return True
    except OSError:
        return False
    return False


def _search(root: Path, now: float) -> list[Checkpoint]:
    found: list[Checkpoint] = []
    pending: list[tuple[Path, int]] = [(root, 0)]
    visited = 0
    while pending and visited < MAX_SEARCH_DIRS:
        current, depth = pending.pop(0)
        visited += 1
        try:
            with os.scandir(current) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        names = {e.name for e in entries}
        tracker = read_tracker(current) if MEGATRON_TRACKER in names else None
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                continue
            if not is_dir:
                continue
            path = Path(entry.path)
            if STEP_DIR.match(entry.name):
                found.append(inspect_checkpoint(path, now=now))
            elif ITER_DIR.match(entry.name) or (
                entry.name == RELEASE_DIR and MEGATRON_TRACKER in names
            ):
                found.append(inspect_checkpoint(path, now=now, tracker=tracker))
            elif (
                depth < SEARCH_DEPTH
                and not entry.name.startswith(".")
                and not entry.is_symlink()
                and not _looks_like_checkpoint(path)
            ):
                pending.append((path, depth + 1))
    return found


def _newest_first(cp: Checkpoint) -> tuple[bool, int, float]:
    return (cp.step is not None, cp.step or 0, cp.mtime or 0.0)


def discover(path: Path | str, *, now: float | None = None) -> list[Checkpoint]:
    """Every checkpoint under ``path`` (or ``path`` itself when it is one), newest first
    (highest step, then most recently modified).

    Raises ``BadInput`` when ``path`` is missing, not a directory or cannot be listed."""
    root = Path(path).expanduser()
    now = time.time() if now is None else now
    try:
        st = root.stat()
    except FileNotFoundError:
        raise BadInput(_escaped(f"{root}: no such directory")) from None
    except OSError as exc:
        raise BadInput(_escaped(f"{root}: {exc.strerror or _short(exc)}")) from None
    if not stat.S_ISDIR(st.st_mode):
        raise BadInput(_escaped(f"{root} is not a directory"))
    try:
        os.listdir(root)
    except OSError as exc:
        raise BadInput(
            _escaped(f"{root}: cannot list it ({exc.strerror or _short(exc)})")
        ) from None
    if _looks_like_checkpoint(root):
        return [inspect_checkpoint(root, now=now)]
    found = _search(root, now)
    found.sort(key=_newest_first, reverse=True)
    return found


def latest_complete(path: Path | str) -> Checkpoint | None:
    """The newest complete checkpoint under ``path`` (what a resume should load), or None.

    Like torchtitan's ``load_step=-1``, a newer incomplete checkpoint is skipped. Raises
    ``BadInput`` when ``path`` holds complete checkpoints of more than one run, since the
    highest step across runs means nothing."""
    complete = [cp for cp in discover(path) if cp.complete]
    if not complete:
        return None
    runs = sorted({str(cp.path.parent) for cp in complete})
    if len(runs) > 1:
        shown = ", ".join(runs[:3]) + (", ..." if len(runs) > 3 else "")
        raise BadInput(
            _escaped(f"{path} holds checkpoints of {len(runs)} runs ({shown}); name one")
        )
    return complete[0]


__all__ = [
    "FORMAT_DCP",
    "FORMAT_MEGATRON",
    "FORMAT_MEGATRON_DIST",
    "FORMAT_MEGATRON_LEGACY",
    "FORMAT_SAFETENSORS",
    "MEGATRON_TRACKER",
    "METADATA",
    "STEP_DIR",
    "Checkpoint",
    "checkpoint_complete",
    "discover",
    "inspect_checkpoint",
    "latest_complete",
    "read_dcp_metadata",
    "read_tracker",
    "step_of",
]
