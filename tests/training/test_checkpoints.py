"""``krea-ops train checkpoints`` on checkpoint trees built on disk, through the real CLI.

Each layout is what the trainer leaves behind: DCP / torchtitan step directories with the
pickled ``.metadata`` torch writes (tests/training/dcp_fixture.py), Megatron iteration
directories with their tracker, a torchtitan HF export, and the simulator's own checkpoints
written by its writer (``krea_ops.sim.machines.training``).
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from commands.main import invoke
from krea_ops.errors import BadInput
from krea_ops.sim.machines import training as sim_training
from krea_ops.training.checkpoints import (
    FORMAT_DCP,
    FORMAT_MEGATRON_DIST,
    FORMAT_MEGATRON_LEGACY,
    FORMAT_SAFETENSORS,
    discover,
    inspect_checkpoint,
    latest_complete,
)
from tests.training.dcp_fixture import dcp_metadata_bytes, write_dcp_checkpoint

OLD = time.time() - 3600.0


def run_json(capsys: pytest.CaptureFixture[str], path: Path) -> list[dict[str, Any]]:
    code = invoke(["train", "checkpoints", str(path), "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


def by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {Path(r["path"]).name: r for r in rows}


def age(path: Path, seconds_ago: float = 3600.0) -> None:
    """Make every file under ``path`` look written ``seconds_ago``."""
    when = time.time() - seconds_ago
    for p in [path, *path.rglob("*")]:
        os.utime(p, (when, when))


def torch_zip(path: Path, payload: bytes = b"\x80\x02}q\x00.", truncate: bool = False) -> None:
    """A file as torch.save (zip serialization) writes it; optionally cut in half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", payload)
        zf.writestr("archive/data/0", b"\0" * 4096)
        zf.writestr("archive/version", b"3\n")
    if truncate:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])


# -- DCP / torchtitan ------------------------------------------------------------------


@pytest.fixture
def dcp_run(tmp_path: Path) -> Path:
    """One run's folder: every way a DCP step directory can be found."""
    root = tmp_path / "run"
    write_dcp_checkpoint(root / "step-100")
    write_dcp_checkpoint(root / "step-200")
    age(root)
    # a crash mid-save an hour ago: shards but no .metadata
    write_dcp_checkpoint(root / "step-300", commit=False)
    age(root / "step-300")
    # committed, then a shard lost bytes
    cut = write_dcp_checkpoint(root / "step-400")
    (cut / "__1_0.distcp").write_bytes(b"x" * 1024)
    # committed, then a shard went missing
    gone = write_dcp_checkpoint(root / "step-500")
    (gone / "__3_0.distcp").unlink()
    # garbage where the pickle should be
    garbage = write_dcp_checkpoint(root / "step-600")
    (garbage / ".metadata").write_bytes(b"\x80\x04\x95 pickled Metadata, torn")
    # rank 0 is in finish(): .metadata.tmp written, not yet renamed
    tmp = write_dcp_checkpoint(root / "step-700", commit=False)
    (tmp / ".metadata.tmp").write_bytes(b"\x80\x04partial")
    # shards being written right now
    write_dcp_checkpoint(root / "step-800", commit=False)
    # names that are not checkpoints
    (root / "step-abc").mkdir()
    (root / "step-1000").write_text("a file, not a directory")
    (root / "notes.txt").write_text("hello")
    return root


def test_dcp_run_reports_each_checkpoint_and_why(
    dcp_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = run_json(capsys, dcp_run)
    assert [r["step"] for r in rows] == [800, 700, 600, 500, 400, 300, 200, 100]
    got = by_name(rows)
    assert set(rows[0]) >= {
        "path",
        "format",
        "step",
        "modified_at",
        "modified_unix_s",
        "size_bytes",
        "complete",
        "reason",
        "tracker",
    }
    for name in ("step-100", "step-200"):
        assert got[name]["complete"] is True
        assert got[name]["reason"] is None
        assert got[name]["format"] == FORMAT_DCP
        assert got[name]["size_bytes"] == 4 * 2048 + (dcp_run / name / ".metadata").stat().st_size
        assert got[name]["tracker"] is False
        assert got[name]["modified_at"].endswith("Z")
    assert got["step-300"]["complete"] is False
    assert got["step-300"]["reason"] == (
        ".metadata missing (still being written or crashed mid-save)"
    )
    assert got["step-400"]["reason"] == (
        "shard __1_0.distcp is 1,024 bytes, metadata says at least 2,048"
    )
    assert got["step-500"]["reason"] == "shard __3_0.distcp missing"
    assert got["step-600"]["complete"] is False
    assert got["step-600"]["reason"].startswith(".metadata unreadable: not a readable pickle")
    assert got["step-700"]["reason"] == "still being written: .metadata.tmp present"
    assert got["step-800"]["reason"].startswith("still being written: newest file modified ")
    assert got["step-800"]["reason"].endswith("s ago, no .metadata yet")
    # the commit time is .metadata's mtime
    meta_mtime = (dcp_run / "step-200" / ".metadata").stat().st_mtime
    assert got["step-200"]["modified_unix_s"] == pytest.approx(meta_mtime, abs=0.01)

    found = latest_complete(dcp_run)
    assert found is not None and found.path == dcp_run / "step-200"


def test_dcp_table_fits_80_columns_and_says_why(
    dcp_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert invoke(["train", "checkpoints", str(dcp_run)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"Checkpoints under {dcp_run}, newest first:"
    assert all(len(line.rstrip()) <= 80 for line in lines[1:]), out
    assert lines[1].split() == [
        "CHECKPOINT",
        "STEP",
        "AGE",
        "SIZE",
        "COMPLETE",
        "WHY",
        "NOT",
        "/",
        "NOTES",
    ]
    row = next(line for line in lines if line.startswith("step-200"))
    # an hour ago, as kubectl prints AGE (it says 60m until 3h)
    assert " 60m " in row and "KiB" in row and " yes" in row
    row = next(line for line in lines if line.startswith("step-500"))
    assert " no " in row and "shard __3_0.distcp missing" in row
    text = " ".join(" ".join(line.split()) for line in lines)
    assert "metadata says at least 2,048" in text


def test_restricted_unpickler_refuses_code_and_runs_nothing(tmp_path: Path) -> None:
    sentinel = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {sentinel}",))

    step = write_dcp_checkpoint(tmp_path / "step-1")
    (step / ".metadata").write_bytes(pickle.dumps(Evil()))
    cp = inspect_checkpoint(step)
    assert not cp.complete
    assert cp.reason is not None and ".system, which DCP metadata never holds" in cp.reason
    assert not sentinel.exists()

    # a pickle of something other than Metadata
    (step / ".metadata").write_bytes(pickle.dumps({"storage_data": {}}))
    cp = inspect_checkpoint(step)
    assert cp.reason == ".metadata unreadable: not a DCP Metadata object (found dict)"

    # a .metadata that names a file outside the checkpoint
    (step / ".metadata").write_bytes(dcp_metadata_bytes({"../../etc/passwd": [("w", 4)]}, step))
    cp = inspect_checkpoint(step)
    assert (
        cp.reason == ".metadata unreadable: names a file outside the checkpoint (../../etc/passwd)"
    )

    (step / ".metadata").write_bytes(b"")
    assert inspect_checkpoint(step).reason == ".metadata unreadable: empty file (a torn write)"


def test_torchtitan_dump_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = tmp_path / "outputs"
    write_dcp_checkpoint(dump / "checkpoint" / "step-10", ranks=8)
    write_dcp_checkpoint(dump / "checkpoint" / "step-20", ranks=8)
    age(dump)
    write_dcp_checkpoint(dump / "checkpoint" / "step-30", ranks=8, commit=False)
    (dump / "tb").mkdir()
    (dump / "tb" / "events.out").write_text("x")
    # the last step exported for Hugging Face: model.safetensors.index.json, no .metadata
    hf = dump / "checkpoint" / "step-40"
    hf.mkdir()
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    shard = struct.pack("<Q", len(header)) + header + b"\0" * 16
    (hf / "model-00001-of-00001.safetensors").write_bytes(shard)
    (hf / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "model-00001-of-00001.safetensors"}})
    )

    rows = run_json(capsys, dump)
    assert [(r["step"], r["complete"], r["format"]) for r in rows] == [
        (40, True, FORMAT_SAFETENSORS),
        (30, False, FORMAT_DCP),
        (20, True, FORMAT_DCP),
        (10, True, FORMAT_DCP),
    ]
    (hf / "model-00001-of-00001.safetensors").write_bytes(shard[:-4])
    rows = run_json(capsys, dump)
    assert rows[0]["reason"] == (
        f"shard model-00001-of-00001.safetensors is {len(shard) - 4:,} bytes, "
        f"its header says at least {len(shard):,}"
    )
    found = latest_complete(dump)
    assert found is not None and found.path == dump / "checkpoint" / "step-20"

    # PATH that is itself one checkpoint directory
    rows = run_json(capsys, dump / "checkpoint" / "step-30")
    assert len(rows) == 1 and rows[0]["step"] == 30 and rows[0]["complete"] is False

    assert invoke(["train", "checkpoints", str(dump)]) == 0
    out = capsys.readouterr().out
    assert "checkpoint/step-20" in out


# -- Megatron --------------------------------------------------------------------------


@pytest.fixture
def megatron_save(tmp_path: Path) -> Path:
    save = tmp_path / "megatron"
    for it in (100, 200, 300):
        for rank in ("mp_rank_00_000", "mp_rank_01_000", "mp_rank_00_001", "mp_rank_01_001"):
            torch_zip(save / f"iter_{it:07d}" / rank / "model_optim_rng.pt")
    # a pipeline stage never arrived
    for rank in ("mp_rank_00_000", "mp_rank_01_000", "mp_rank_00_001"):
        torch_zip(save / "iter_0000150" / rank / "model_optim_rng.pt")
    # one rank's file was cut short
    for rank in ("mp_rank_00", "mp_rank_01"):
        torch_zip(
            save / "iter_0000050" / rank / "model_optim_rng.pt", truncate=rank == "mp_rank_01"
        )
    (save / "latest_checkpointed_iteration.txt").write_text("200")
    age(save)
    return save


def test_megatron_legacy_with_tracker(
    megatron_save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = by_name(run_json(capsys, megatron_save))
    assert set(got) == {
        "iter_0000300",
        "iter_0000200",
        "iter_0000150",
        "iter_0000100",
        "iter_0000050",
    }
    assert all(r["format"] == FORMAT_MEGATRON_LEGACY for r in got.values())
    assert got["iter_0000200"]["complete"] is True and got["iter_0000200"]["tracker"] is True
    assert got["iter_0000100"]["complete"] is True and got["iter_0000100"]["tracker"] is False
    assert got["iter_0000300"]["complete"] is False
    assert got["iter_0000300"]["reason"] == (
        "not committed: latest_checkpointed_iteration.txt says 200 "
        "(Megatron writes it after every rank has saved)"
    )
    assert got["iter_0000150"]["reason"] == "mp_rank_01_001 missing"
    assert got["iter_0000050"]["reason"] == (
        "mp_rank_01/model_optim_rng.pt is truncated (no zip end record)"
    )

    assert invoke(["train", "checkpoints", str(megatron_save)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("iter_0000200"))
    assert "yes" in row and "the Megatron tracker points here" in row


def test_megatron_torch_dist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save = tmp_path / "save"
    for it in (1000, 2000):
        d = write_dcp_checkpoint(save / f"iter_{it:07d}", ranks=2)
        torch_zip(d / "common.pt")
        (d / "metadata.json").write_text(
            '{"sharded_backend": "torch_dist", "sharded_backend_version": 1}'
        )
    # the newest: DCP committed, common.pt missing
    d = write_dcp_checkpoint(save / "iter_0003000", ranks=2)
    (d / "metadata.json").write_text("{}")
    (save / "latest_checkpointed_iteration.txt").write_text("1000\n")

    got = by_name(run_json(capsys, save))
    assert all(r["format"] == FORMAT_MEGATRON_DIST for r in got.values())
    assert got["iter_0001000"]["complete"] is True and got["iter_0001000"]["tracker"] is True
    assert got["iter_0002000"]["complete"] is True and got["iter_0002000"]["tracker"] is False
    assert got["iter_0002000"]["note"] == (
        "newer than the tracker (1000): Megatron --load will not pick it"
    )
    assert got["iter_0003000"]["reason"] == "common.pt missing (Megatron needs it to load)"

    # one iteration directory given directly still knows the tracker next to it
    rows = run_json(capsys, save / "iter_0001000")
    assert len(rows) == 1 and rows[0]["tracker"] is True

    # a torn tracker write: nothing is the tracker's, and the note says why
    (save / "latest_checkpointed_iteration.txt").write_text("10")
    (save / "latest_checkpointed_iteration.txt").write_bytes(b"\x00\x00")
    got = by_name(run_json(capsys, save))
    assert not any(r["tracker"] for r in got.values())
    assert got["iter_0001000"]["note"] == (
        "latest_checkpointed_iteration.txt unreadable (a torn write?)"
    )


# -- the simulator's checkpoints -------------------------------------------------------


def test_simulator_checkpoints_and_the_simulator_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "checkpoints" / "training" / "dit-xl"

    def sim_checkpoint(step: int, ranks: int = 8, commit: bool = True) -> Path:
        d = root / f"step-{step}"
        d.mkdir(parents=True)
        for rank in range(ranks):
            sim_training.write_shard(d, rank, step, 4096)
        if commit:
            sim_training.commit_checkpoint(d, step, ranks, {"training": "training/dit-xl"})
        return d

    sim_checkpoint(600)
    sim_checkpoint(1200)
    age(root)
    crashed = sim_checkpoint(1800, commit=False)
    for rank in (5, 6, 7):
        (crashed / f"__{rank}_0.distcp").unlink()  # the gang broke mid-write
    age(crashed)
    cut = sim_checkpoint(2400)
    (cut / "__2_0.distcp").write_bytes(b"\0" * 100)
    (root / "step-3000").mkdir()  # created, nothing written yet

    rows = run_json(capsys, tmp_path / "checkpoints")
    assert [(r["step"], r["complete"]) for r in rows] == [
        (3000, False),
        (2400, False),
        (1800, False),
        (1200, True),
        (600, True),
    ]
    got = by_name(rows)
    assert got["step-2400"]["reason"] == (
        "shard __2_0.distcp is 100 bytes, metadata says at least 4,096"
    )
    assert got["step-1800"]["reason"] == (
        ".metadata missing (still being written or crashed mid-save)"
    )

    # the simulator's resume logic and the product agree, directory by directory
    for _step, d, complete in sim_training.list_checkpoints(root):
        assert complete == got[d.name]["complete"], d
    assert sim_training.latest_complete_checkpoint(root) == (1200, root / "step-1200")
    product = latest_complete(root)
    assert product is not None and product.path == root / "step-1200"


def test_latest_complete_refuses_a_path_with_several_runs(tmp_path: Path) -> None:
    write_dcp_checkpoint(tmp_path / "a" / "step-1")
    write_dcp_checkpoint(tmp_path / "b" / "step-2")
    with pytest.raises(BadInput, match="holds checkpoints of 2 runs"):
        latest_complete(tmp_path)
    found = latest_complete(tmp_path / "a")
    assert found is not None and found.step == 1
    assert latest_complete(tmp_path / "a" / "step-1") == found
    assert latest_complete(tmp_path / "a" / "step-1").path == tmp_path / "a" / "step-1"  # type: ignore[union-attr]


# -- empty and bad PATHs ---------------------------------------------------------------


def test_no_checkpoints_is_not_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_json(capsys, tmp_path) == []
    assert invoke(["train", "checkpoints", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"No checkpoints under {tmp_path}")
    assert discover(tmp_path) == []
    assert latest_complete(tmp_path) is None


def test_bad_paths_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for path, message in (
        (tmp_path / "missing", f"error: {tmp_path / 'missing'}: no such directory"),
        (a_file, f"error: {a_file} is not a directory"),
    ):
        assert invoke(["train", "checkpoints", str(path), "-o", "json"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.strip() == message

    if os.geteuid() != 0:  # root reads any directory
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0)
        try:
            assert invoke(["train", "checkpoints", str(locked)]) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"error: {locked}: cannot list it") and err.count("\n") == 1
        finally:
            locked.chmod(0o755)


def test_real_torch_dcp_save_when_torch_is_installed(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    step = tmp_path / "step-7"
    dcp.save({"w": torch.ones(256), "b": torch.zeros(3)}, checkpoint_id=str(step))
    cp = inspect_checkpoint(step)
    assert cp.complete, cp.reason
    shard = next(step.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:10])
    assert inspect_checkpoint(step).reason.startswith(f"shard {shard.name} is 10 bytes")  # type: ignore[union-attr]


def test_the_pods_checkpoint_path_is_read_where_it_is_mounted_here(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found: the checkpoint path the dashboard shows (the pods' path) did not work with
    ``train checkpoints`` on the machine the CLI runs on."""
    monkeypatch.setenv("KREA_OPS_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.delenv("KREA_OPS_TRAINING_CHECKPOINT_MOUNT", raising=False)
    pods = "/checkpoints/training/dit-xl"
    assert invoke(["train", "checkpoints", pods]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {pods}: no such directory here; it is the pods' checkpoint path: say where "
        "their volume is mounted on this machine with training_checkpoint_mount "
        "(KREA_OPS_TRAINING_CHECKPOINT_MOUNT=/checkpoints=/mnt/checkpoints, say)"
    )
    write_dcp_checkpoint(tmp_path / "mnt" / "training" / "dit-xl" / "step-100")
    monkeypatch.setenv("KREA_OPS_TRAINING_CHECKPOINT_MOUNT", f"/checkpoints={tmp_path / 'mnt'}")
    assert invoke(["train", "checkpoints", pods, "-o", "json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["step"] == 100 and row["complete"] is True


def test_a_run_is_resolved_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``train checkpoints NAME`` (or NAMESPACE/NAME) reads the checkpoints of the run of
    that name, where its JobSet says they go; a name no run has is one line, exit 2."""
    from kubernetes import client

    from krea_ops.sim.apiserver.local import LocalApiServer
    from krea_ops.training.runs import CHECKPOINT_DIR_ANNOTATION

    monkeypatch.setenv("KREA_OPS_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("KREA_OPS_TRAINING_CHECKPOINT_MOUNT", f"/checkpoints={tmp_path / 'mnt'}")
    write_dcp_checkpoint(tmp_path / "mnt" / "training" / "dit-xl" / "step-200")
    with LocalApiServer(tmp_path / "api") as server, server.api_client() as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": "training"}})
        jobset = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {
                "name": "dit-xl",
                "labels": {"krea.ai/workload": "training"},
                "annotations": {CHECKPOINT_DIR_ANNOTATION: "/checkpoints/training/dit-xl"},
            },
            "spec": {"replicatedJobs": []},
        }
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "training", "jobsets", jobset
        )
        kc = ["--kubeconfig", str(server.kubeconfig)]
        for name in ("dit-xl", "training/dit-xl"):
            assert invoke([*kc, "train", "checkpoints", name, "-o", "json"]) == 0
            [row] = json.loads(capsys.readouterr().out)
            assert row["step"] == 200 and row["complete"] is True
        assert invoke([*kc, "train", "checkpoints", "no-such-run"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no training run of that name" in err
