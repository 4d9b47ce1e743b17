"""Write DCP checkpoints whose ``.metadata`` is the pickle torch itself writes.

torch is not a dependency, so when it is not installed the classes DCP pickles are
recreated here under their real module names (``torch.distributed.checkpoint.metadata``,
``torch.distributed.checkpoint.filesystem``, ``torch.Size``, ``torch.float32``), copied field
for field from torch's source (metadata.py and filesystem.py of torch 2.x, including
``TensorProperties.__getstate__`` and ``_StorageInfo.__getstate__``), and registered in
``sys.modules`` only while pickling. The pickle stream then names the same globals, in the
same opcodes, as ``FileSystemWriter.finish()``'s ``pickle.dump(metadata, f)``. With torch
installed the real classes are used instead.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pickle
import sys
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

MODULES = (
    "torch",
    "torch.distributed",
    "torch.distributed.checkpoint",
    "torch.distributed.checkpoint.metadata",
    "torch.distributed.checkpoint.filesystem",
)


def _stand_in_modules() -> dict[str, types.ModuleType]:
    mods = {name: types.ModuleType(name) for name in MODULES}
    torch, meta, fs = mods["torch"], mods[MODULES[3]], mods[MODULES[4]]

    def place(mod: types.ModuleType, obj: Any, name: str | None = None) -> Any:
        name = name or obj.__name__
        obj.__module__, obj.__qualname__ = mod.__name__, name
        setattr(mod, name, obj)
        return obj

    class Size(tuple):  # type: ignore[type-arg]
        def __reduce__(self) -> Any:
            return (Size, (tuple(self),))

    class _Named:
        def __init__(self, name: str) -> None:
            self.name = name

        def __reduce__(self) -> str:  # like torch.dtype / torch.layout: a global name
            return self.name

    class dtype(_Named):
        pass

    class layout(_Named):
        pass

    class memory_format(_Named):
        pass

    place(torch, Size)
    for cls in (dtype, layout, memory_format):
        place(torch, cls)
    for name in ("float32", "bfloat16"):
        setattr(torch, name, dtype(name))
    torch.strided = layout("strided")  # type: ignore[attr-defined]
    torch.contiguous_format = memory_format("contiguous_format")  # type: ignore[attr-defined]

    encoding = Enum(  # type: ignore[misc]
        "_MEM_FORMAT_ENCODING",
        {"TORCH_CONTIGUOUS_FORMAT": 0, "TORCH_CHANNELS_LAST": 1, "TORCH_PRESERVE_FORMAT": 2},
        module=meta.__name__,
        qualname="_MEM_FORMAT_ENCODING",
    )
    meta._MEM_FORMAT_ENCODING = encoding  # type: ignore[attr-defined]

    @dataclass
    class ChunkStorageMetadata:
        offsets: Any
        sizes: Any

    @dataclass
    class TensorProperties:
        dtype: Any = None
        layout: Any = None
        requires_grad: bool = False
        memory_format: Any = None
        pin_memory: bool = False

        def __getstate__(self) -> Any:
            return (
                self.dtype,
                self.layout,
                self.requires_grad,
                encoding.TORCH_CONTIGUOUS_FORMAT,
                self.pin_memory,
            )

    @dataclass
    class TensorStorageMetadata:
        properties: Any
        size: Any
        chunks: list[Any]

    @dataclass
    class BytesStorageMetadata:
        pass

    @dataclass
    class StorageMeta:
        checkpoint_id: Any = None
        save_id: str | None = None
        load_id: str | None = None
        modules: list[str] = field(default_factory=list)

    @dataclass
    class Metadata:
        state_dict_metadata: dict[str, Any]
        planner_data: Any = None
        storage_data: Any = None
        storage_meta: Any = None
        version: str | None = None

    @dataclass(frozen=True)
    class MetadataIndex:
        fqn: str
        offset: Any = None
        index: int | None = field(hash=False, compare=False, default=None)

        def __init__(self, fqn: str, offset: Any = None, index: int | None = None) -> None:
            object.__setattr__(self, "fqn", fqn)
            object.__setattr__(self, "index", index)
            if offset is not None:
                object.__setattr__(self, "offset", Size(offset))

    @dataclass
    class _StorageInfo:
        relative_path: str
        offset: int
        length: int
        transform_descriptors: Sequence[str] | None = None

        def __getstate__(self) -> Any:
            return {k: v for k, v in self.__dict__.items() if v is not None}

    for dc in (
        ChunkStorageMetadata,
        TensorProperties,
        TensorStorageMetadata,
        BytesStorageMetadata,
        StorageMeta,
        Metadata,
        MetadataIndex,
    ):
        place(meta, dc)
    place(fs, _StorageInfo)
    return mods


@contextlib.contextmanager
def dcp_classes() -> Iterator[dict[str, Any]]:
    """The classes and values DCP pickles: torch's own, or the stand-ins while inside."""
    if importlib.util.find_spec("torch") is not None:
        import torch
        from torch.distributed.checkpoint import filesystem, metadata

        yield {"torch": torch, "meta": metadata, "fs": filesystem}
        return
    mods = _stand_in_modules()
    saved = {name: sys.modules.get(name) for name in MODULES}
    sys.modules.update(mods)
    try:
        yield {"torch": mods["torch"], "meta": mods[MODULES[3]], "fs": mods[MODULES[4]]}
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


def dcp_metadata_bytes(
    files: dict[str, list[tuple[str, int]]], checkpoint_dir: Path, extra_item: bool = True
) -> bytes:
    """The pickled ``Metadata`` for shards ``{file: [(fqn, length), ...]}``, items laid
    end to end in each file as ``_write_item`` does; tensors are float32 vectors."""
    with dcp_classes() as c:
        torch, meta, fs = c["torch"], c["meta"], c["fs"]
        state: dict[str, Any] = {}
        storage: dict[Any, Any] = {}
        for rel, items in files.items():
            offset = 0
            for fqn, length in items:
                if fqn.startswith("bytes:"):
                    index = meta.MetadataIndex(fqn)
                    state[fqn] = meta.BytesStorageMetadata()
                else:
                    n = max(length // 4, 1)
                    index = meta.MetadataIndex(fqn, [0])
                    props = meta.TensorProperties(
                        dtype=torch.float32,
                        layout=torch.strided,
                        memory_format=torch.contiguous_format,
                    )
                    chunk = meta.ChunkStorageMetadata(
                        offsets=torch.Size([0]), sizes=torch.Size([n])
                    )
                    state[fqn] = meta.TensorStorageMetadata(props, torch.Size([n]), [chunk])
                storage[index] = fs._StorageInfo(rel, offset, length)
                offset += length
        md = meta.Metadata(
            state_dict_metadata=state,
            storage_data=storage,
            storage_meta=meta.StorageMeta(checkpoint_id=Path(checkpoint_dir), save_id="0" * 36),
            version="1.0.0",
        )
        return pickle.dumps(md)


def write_dcp_checkpoint(
    step_dir: Path,
    ranks: int = 4,
    item_bytes: int = 1024,
    commit: bool = True,
) -> Path:
    """A DCP checkpoint as ``FileSystemWriter`` leaves it: ``__<rank>_0.distcp`` per rank,
    two tensors each, then ``.metadata`` through ``.metadata.tmp`` and a rename."""
    step_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[tuple[str, int]]] = {}
    for rank in range(ranks):
        rel = f"__{rank}_0.distcp"
        items = [(f"model.layers.{rank}.w", item_bytes), (f"optim.layers.{rank}.m", item_bytes)]
        (step_dir / rel).write_bytes(bytes([rank % 256]) * sum(n for _, n in items))
        files[rel] = items
    if commit:
        tmp = step_dir / ".metadata.tmp"
        tmp.write_bytes(dcp_metadata_bytes(files, step_dir))
        os.replace(tmp, step_dir / ".metadata")
    return step_dir
