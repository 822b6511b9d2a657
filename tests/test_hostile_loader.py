"""``metalint load`` on hostile checkpoints: no code runs, memory and time stay bounded.

Every case runs the CLI in a process of its own under an address-space limit (4 GiB for a fresh
interpreter) and a 60 s timeout, and must end with exit 2 and one line on stderr naming the file,
no traceback. The process is forked from this one, which has imported torch already (a fresh
interpreter per case took seconds each); one case runs ``python -m metalint load`` end to end.
The seeded property tests at the end draw nested pickles (for the torch zip reader) and DCP
metadata.
"""

from __future__ import annotations

import io
import os
import pickle
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zipfile
import zlib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TARGET = f"{Path(__file__).parent / 'loader_models.py'}:TinyLM"
LIMIT_AS = 4 * 2**30
TIMEOUT = 60
CI = settings(
    max_examples=60,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))


def load_cli(ckpt, cwd, *, fresh: bool = False) -> tuple[subprocess.CompletedProcess, float]:
    """``metalint load CKPT --model TARGET`` from ``cwd``: its outcome and seconds. ``fresh``:
    as ``python -m metalint`` in a new interpreter; otherwise in a child forked from this
    process (:func:`_forked_load`)."""
    args = ["load", str(ckpt), "--model", TARGET]
    t0 = time.monotonic()
    if not fresh:
        return _forked_load(args, cwd), time.monotonic() - t0
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    r = subprocess.run(
        [sys.executable, "-m", "metalint", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        preexec_fn=_limit,
        cwd=cwd,
        env=env,
    )
    return r, time.monotonic() - t0


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        line = next(ln for ln in f if ln.startswith("VmSize:"))
    return int(line.split()[1]) * 1024


#: what a fresh interpreter with torch and metalint takes of LIMIT_AS (about 0.6 GiB)
FRESH_AS = 2**30


def _forked_load(args: list[str], cwd) -> subprocess.CompletedProcess:
    """The CLI's ``main(args)`` in a forked child: the address space it may add is what a fresh
    interpreter had under LIMIT_AS; its exit status and output come back as ``subprocess.run``
    gives them. An exception the CLI lets out is printed as a traceback, exit 1, as
    ``python -m metalint`` would; past TIMEOUT the child is killed (TimeoutExpired)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        limit = _vm_size() + LIMIT_AS - FRESH_AS
        sys.stdout.flush(), sys.stderr.flush()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork of a threaded process
            pid = os.fork()
        if pid == 0:  # the child: never returns
            _child(args, cwd, out, err, limit)
        status = _wait(pid, args)
        out.seek(0), err.seek(0)
        text = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    return subprocess.CompletedProcess(args, os.waitstatus_to_exitcode(status), *text)


def _child(args, cwd, out, err, limit: int) -> None:
    code = 1
    try:
        os.dup2(out.fileno(), 1), os.dup2(err.fileno(), 2)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        os.chdir(cwd)
        torch.set_num_threads(1)
        warnings.simplefilter("ignore")
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        from metalint.cli import main

        main(args, prog_name="metalint")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (e.code is not None)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)


def _wait(pid: int, args) -> int:
    """The child's wait status; past TIMEOUT it is killed and TimeoutExpired raised."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise subprocess.TimeoutExpired(args, TIMEOUT)
        time.sleep(0.01)


def one_line_error(r: subprocess.CompletedProcess, names) -> str:
    """The one error line of a refused load; it names ``names`` (file, tensor)."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and "Warning" not in ln]
    lines = [ln for ln in lines if not ln.startswith("  ")]  # a warning's source line
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(lines) == 1, r.stderr[-2000:]
    line = lines[0]
    assert line.startswith("metalint load: error: "), line[:300]
    assert len(line) < 2000, f"{len(line)} chars: {line[:300]}"
    for n in names:
        assert str(n) in line, line
    return line


@pytest.fixture
def state():
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from loader_models import TinyLM
    finally:
        sys.path.pop(0)
    return TinyLM().state_dict()


def save_dcp(sd: dict, folder: Path) -> Path:
    import warnings

    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(sd, checkpoint_id=str(folder), no_dist=True)
    return folder


# -- DCP ------------------------------------------------------------------------------------


class _Payload:
    """Unpickled, creates the file ``path``: proof that code of the checkpoint ran."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_dcp_metadata_with_a_reduce_payload_runs_nothing(state, tmp_path):
    folder = save_dcp(state, tmp_path / "dcp")
    marker = tmp_path / "RAN"
    (folder / ".metadata").write_bytes(pickle.dumps(_Payload(str(marker))))
    r, _ = load_cli(folder, tmp_path)
    line = one_line_error(r, [folder / ".metadata"])
    assert not marker.exists(), "the pickle in .metadata ran"
    assert ".open is not allowed" in line


def test_dcp_metadata_payload_inside_a_real_metadata_runs_nothing(state, tmp_path):
    # the payload as the value of a field of the real Metadata: DCP's own reader runs it
    from torch.distributed.checkpoint import FileSystemReader

    folder = save_dcp(state, tmp_path / "dcp")
    marker = tmp_path / "RAN"
    md = FileSystemReader(str(folder)).read_metadata()
    md.version = _Payload(str(marker))
    (folder / ".metadata").write_bytes(pickle.dumps(md))
    r, _ = load_cli(folder, tmp_path)
    one_line_error(r, [folder / ".metadata"])
    assert not marker.exists(), "the pickle in .metadata ran"


def test_dcp_truncated_distcp_is_one_line(state, tmp_path):
    folder = save_dcp(state, tmp_path / "dcp")
    (shard,) = folder.glob("*.distcp")
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    r, _ = load_cli(folder, tmp_path)
    line = one_line_error(r, [shard])
    assert "truncated" in line


def test_dcp_item_outside_the_folder_is_refused(state, tmp_path):
    from torch.distributed.checkpoint import FileSystemReader

    folder = save_dcp(state, tmp_path / "dcp")
    md = FileSystemReader(str(folder)).read_metadata()
    for info in md.storage_data.values():
        info.relative_path = "/dev/zero"
    (folder / ".metadata").write_bytes(pickle.dumps(md))
    r, _ = load_cli(folder, tmp_path)
    line = one_line_error(r, [folder])
    assert "is not a file name in the checkpoint folder" in line


def test_dcp_legit_loads_and_reads_the_same(state, tmp_path):
    from metalint.loader import open_checkpoint

    folder = save_dcp(state, tmp_path / "dcp")
    with open_checkpoint(folder) as src:
        assert set(src.entries) == set(state)
        for k, v in state.items():
            assert torch.equal(src.read(k), v)


# -- torch zips -------------------------------------------------------------------------------


def _torch_zip_with_pkl(state: dict, path: Path, data_pkl: bytes | None = None, **kw) -> Path:
    """``torch.save(state)`` at ``path``, its data.pkl replaced by ``data_pkl`` (written with
    ``kw`` as the ZipInfo's compression) when given."""
    buf = io.BytesIO()
    torch.save(state, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zi, zipfile.ZipFile(path, "w") as zo:
        for info in zi.infolist():
            data = zi.read(info)
            if info.filename.endswith("/data.pkl") and data_pkl is not None:
                zo.writestr(info.filename, data_pkl, **kw)
            else:
                zo.writestr(info, data)
    return path


def nested_reduce_bomb(depth: int = 64) -> bytes:
    """``x = storage; x = f(x, x)`` ``depth`` times: each level names every storage of the
    one below twice, 2**depth in all to a reader that copies them."""
    out = bytearray(b"\x80\x02")
    out += b"c__main__\nf\nq\x00"
    out += b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x01tQq\x01"
    for i in range(1, depth + 1):
        out += b"h\x00" + b"h" + bytes([i]) + b"h" + bytes([i]) + b"\x86R" + b"q" + bytes([i + 1])
    out += b"}X\x01\x00\x00\x00wh" + bytes([depth + 1]) + b"s."
    return bytes(out)


def test_nested_reduce_bomb_is_bounded(tmp_path):
    bomb = nested_reduce_bomb()
    assert len(bomb) < 1500
    path = _torch_zip_with_pkl({"w": torch.zeros(1)}, tmp_path / "bomb.bin", bomb)
    r, seconds = load_cli(path, tmp_path)
    line = one_line_error(r, [path])
    assert "MemoryError" not in line
    assert seconds < TIMEOUT


def test_nested_reduce_bomb_reads_in_linear_work(tmp_path):
    # in-process: the stand-in reader shares what it built, so the walk is tiny
    from metalint.loader.records import _claim_storages, _Scanner

    scanner = _Scanner(nested_reduce_bomb(depth=64))
    obj = scanner.load()
    _claim_storages(obj)
    assert scanner.work < 1000
    assert scanner.storages["0"].tensor == "w"


def deflate_bomb_zip(state: dict, path: Path, n: int = 48, block_mib: int = 64) -> Path:
    """``torch.save(state)`` whose data.pkl is the pickle, then ``n`` blocks of ``block_mib``
    MiB of zeros after its STOP, DEFLATE-compressed about 1000:1 (built from one compressed
    block: after a full flush, deflate compresses the same input to the same bytes)."""
    buf = io.BytesIO()
    torch.save(state, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zi:
        name = next(n for n in zi.namelist() if n.endswith("/data.pkl"))
        pkl = zi.read(name)
        others = [(i, zi.read(i)) for i in zi.infolist() if i.filename != name]
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = bytes(block_mib * 2**20)
    head = c.compress(pkl) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    raw = head + block * n + c.flush()
    crc = zlib.crc32(pkl)
    for _ in range(n):
        crc = zlib.crc32(chunk, crc)
    with zipfile.ZipFile(path, "w") as zo:
        zo.writestr(zipfile.ZipInfo(name), raw)  # stored: patched to DEFLATE below
        for info, data in others:
            zo.writestr(info, data)
    with zipfile.ZipFile(path) as zf:
        central = zf.start_dir  # data.pkl was written first: its entries come first
    data = bytearray(path.read_bytes())
    fields = struct.pack("<H", zipfile.ZIP_DEFLATED), struct.pack("<I", crc)
    size = struct.pack("<I", len(pkl) + n * len(chunk))
    local = 0
    for at, method, crc_at, size_at in ((local, 8, 14, 22), (central, 10, 16, 24)):
        data[at + method : at + method + 2] = fields[0]
        data[at + crc_at : at + crc_at + 4] = fields[1]
        data[at + size_at : at + size_at + 4] = size
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as zf:  # a well-formed zip: the bomb is in what it unpacks to
        info = zf.getinfo(name)
        assert info.file_size > n * len(chunk) and info.compress_size < info.file_size / 900
    return path


def test_data_pkl_zip_bomb_is_refused_before_unpacking(tmp_path):
    # 3 GiB from 3 MB
    path = deflate_bomb_zip({"w": torch.zeros(1)}, tmp_path / "bomb.pt")
    r, seconds = load_cli(path, tmp_path)
    line = one_line_error(r, [path])
    assert "unpacks to 3221225" in line and "over the 67108864-byte limit" in line, line
    assert seconds < TIMEOUT


def test_data_pkl_under_the_size_limit_but_over_the_ratio_is_refused(tmp_path):
    from metalint.loader import CheckpointError, open_checkpoint

    path = deflate_bomb_zip({"w": torch.zeros(1)}, tmp_path / "bomb.pt", n=32, block_mib=1)
    with pytest.raises(CheckpointError, match=r"bomb.pt: record .*data.pkl unpacks .* zip bomb"):
        open_checkpoint(path)


def test_data_pkl_memo_index_of_2_31_is_not_a_memory_bomb(tmp_path):
    # LONG_BINPUT 2**31: the C unpickler allocates and clears a memo array that large
    pkl = b"\x80\x02}r\x00\x00\x00\x80."
    path = _torch_zip_with_pkl({"w": torch.zeros(1)}, tmp_path / "m.pt", pkl)
    r, seconds = load_cli(path, tmp_path)
    line = one_line_error(r, [path])
    assert "MemoryError" not in line
    assert seconds < TIMEOUT


@pytest.mark.parametrize("where", ["data.pkl", ".metadata"])
def test_a_dict_key_a_million_tuples_deep_is_refused_not_hashed(tmp_path, where):
    # hashing it would overflow the C stack: only plain keys (and DCP's checked
    # MetadataIndex) are hashed
    from metalint.loader import CheckpointError
    from metalint.loader.dcp import read_metadata
    from metalint.loader.records import check_zip_records

    pkl = b"\x80\x02}" + b")" + b"\x85" * 1_000_000 + b"K\x01s."
    if where == "data.pkl":
        path = _torch_zip_with_pkl({"w": torch.zeros(1)}, tmp_path / "m.pt", pkl)
        read = lambda: check_zip_records(str(path))  # noqa: E731
    else:
        (tmp_path / ".metadata").write_bytes(pkl)
        read = lambda: read_metadata(str(tmp_path))  # noqa: E731
    with pytest.raises(CheckpointError, match="dict key of type tuple"):
        read()


def test_data_pkl_code_is_never_called(tmp_path):
    from metalint.loader.records import check_zip_records

    marker = tmp_path / "RAN"
    pkl = pickle.dumps({"w": _Payload(str(marker))}, protocol=2)
    path = _torch_zip_with_pkl({"w": torch.zeros(1)}, tmp_path / "m.pt", pkl)
    check_zip_records(str(path))  # reads it (nothing to check): builds stand-ins only
    assert not marker.exists()
    r, _ = load_cli(path, tmp_path, fresh=True)  # the end-to-end case: a new interpreter
    one_line_error(r, [path])  # torch.load(weights_only=True) refuses the global
    assert not marker.exists()


# -- safetensors ------------------------------------------------------------------------------


def test_huge_safetensors_header_is_refused_quickly(tmp_path):
    n = 1_400_000
    parts = [f'"t{i}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}' for i in range(n)]
    header = ("{" + ",".join(parts) + "}").encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "huge.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        f.write(bytes(n))
    del parts, header
    r, seconds = load_cli(path, tmp_path)
    line = one_line_error(r, [path])
    assert "200000" in line and len(line) < 500
    assert seconds < 30


def test_a_tensor_name_of_megabytes_is_cut_short(tmp_path):
    from metalint.loader import CheckpointError, open_checkpoint

    name = "n" * 2_000_000
    header = f'{{"{name}":{{"dtype":"X","shape":[1],"data_offsets":[0,1]}}}}'.encode()
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0")
    with pytest.raises(CheckpointError) as info:
        open_checkpoint(path)
    assert len(str(info.value)) < 1500 and "\n" not in str(info.value)


# -- special files ----------------------------------------------------------------------------


def _tiny_safetensors(folder: Path) -> None:
    from metalint.loader import save_safetensors

    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from loader_models import TinyLM
    finally:
        sys.path.pop(0)
    save_safetensors(TinyLM().state_dict(), folder / "model-00001.safetensors")


def test_index_that_is_a_link_to_dev_zero_is_refused(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    _tiny_safetensors(folder)
    index = folder / "model.safetensors.index.json"
    index.symlink_to("/dev/zero")
    r, _ = load_cli(folder, tmp_path)
    line = one_line_error(r, [index])
    assert "a character device" in line


@pytest.mark.parametrize("which", ["index", "shard", "torch file", "given file"])
def test_fifo_is_refused_without_waiting(tmp_path, which):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    if which == "index":
        _tiny_safetensors(folder)
        fifo = folder / "model.safetensors.index.json"
    elif which == "shard":
        _tiny_safetensors(folder)
        fifo = folder / "model-00002.safetensors"
    elif which == "torch file":
        fifo = folder / "model.bin"
    else:
        fifo = folder / "model"
    os.mkfifo(fifo)
    r, _ = load_cli(fifo if which in ("torch file", "given file") else folder, tmp_path)
    line = one_line_error(r, [fifo])
    assert "a named pipe" in line


def test_index_shard_that_is_a_fifo_is_refused(tmp_path):
    import json

    folder = tmp_path / "ckpt"
    folder.mkdir()
    _tiny_safetensors(folder)
    os.mkfifo(folder / "model-00002.safetensors")
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"embed.weight": "model-00002.safetensors"}}))
    r, _ = load_cli(folder, tmp_path)
    line = one_line_error(r, [index, "model-00002.safetensors"])
    assert "a named pipe" in line


# -- seeded properties: nested pickles and DCP metadata ----------------------------------------

#: values a drawn pickle pushes (protocol 2): plain values, containers, globals that would run
#: code if called, a storage persistent id, an OrderedDict
_PUSH = [
    b"N",
    b"K\x07",
    b"J\xff\xff\xff\x7f",
    b"X\x01\x00\x00\x00a",
    b"}",
    b"]",
    b")",
    b"\x88",
    b"c__main__\nf\n",
    b"cos\nsystem\n",
    b"cbuiltins\nexec\n",
    b"ccollections\nOrderedDict\n",
    b"ctorch._utils\n_rebuild_tensor_v2\n",
    b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x01tQ",
]
#: (opcode, items it takes, items it leaves)
_COMBINE = [
    (b"\x86R", 3, 1),  # f(a, b)
    (b"\x85R", 2, 1),  # f(a)
    (b"\x85\x81", 2, 1),  # NEWOBJ
    (b"b", 2, 1),  # BUILD
    (b"\x85", 1, 1),
    (b"\x86", 2, 1),
    (b"\x87", 3, 1),
    (b"0", 1, 0),  # POP
    (b"2", 1, 2),  # DUP
]


@st.composite
def nested_pickles(draw) -> bytes:
    """A protocol-2 pickle drawn op by op, mostly well-formed (the stack depth and the memo
    are tracked), sometimes not; a doubling loop ``x = f(x, x)`` repeated at the end, as in
    the nested-REDUCE bomb."""
    out, depth, memo = bytearray(b"\x80\x02"), 0, 0
    kinds = ["push", "push", "combine", "put", "get", "dict"]
    kinds += ["raw"] if draw(st.integers(0, 3)) == 0 else []
    for _ in range(draw(st.integers(1, 60))):
        kind = draw(st.sampled_from(kinds))
        if kind == "push" or depth == 0:
            out += draw(st.sampled_from(_PUSH))
            depth += 1
        elif kind == "combine":
            op, takes, leaves = draw(st.sampled_from(_COMBINE))
            if depth >= takes:
                out += op
                depth += leaves - takes
        elif kind == "put" and memo < 250:
            out += b"q" + bytes([memo])
            memo += 1
        elif kind == "get" and memo:
            out += b"h" + bytes([draw(st.integers(0, memo - 1))])
            depth += 1
        elif kind == "dict":
            pairs = draw(st.lists(st.sampled_from(_PUSH[:4]), min_size=0, max_size=6))
            out += b"}(" + b"".join(pairs) + (b"N" if len(pairs) % 2 else b"") + b"u"
            depth += 1
        else:  # anything: a malformed pickle is refused in one line too
            out += draw(st.sampled_from([b"R", b"s", b"a", b"t", b"e", b"u", b"r\xff\xff\xff\x7f"]))
    if depth == 0:
        out += b"N"
    f = b"c__main__\nf\nq\xfe"
    loop = b"h\xfeh\xffh\xff\x86Rq\xff"
    out += b"q\xff" + f + b"0" + loop * draw(st.integers(0, 80)) + b"."
    return bytes(out)


@CI
@given(nested_pickles())
def test_property_nested_pickles_are_refused_or_read_in_bounded_work(tmp_path_factory, data):
    from metalint.loader import CheckpointError
    from metalint.loader.pickles import MAX_PICKLE_WORK
    from metalint.loader.records import _claim_storages, _Scanner, check_zip_records

    path = _torch_zip_with_pkl({"w": torch.zeros(1)}, tmp_path_factory.mktemp("p") / "m.pt", data)
    try:
        check_zip_records(str(path))
    except CheckpointError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc) and len(str(exc)) < 1500
    scanner = _Scanner(data)
    try:
        _claim_storages(scanner.load())
    except ValueError:
        pass
    assert scanner.work <= MAX_PICKLE_WORK + 1


@st.composite
def dcp_metadata(draw) -> bytes:
    """A real ``Metadata``'s pickle, then changed: a field swapped for a hostile value, its
    bytes cut or flipped, or a payload put in."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    size = torch.Size(draw(st.lists(st.integers(0, 4), min_size=0, max_size=3)))
    chunk = ChunkStorageMetadata(torch.Size([0] * len(size)), size)
    md = Metadata(
        state_dict_metadata={"w": TensorStorageMetadata(TensorProperties(), size, [chunk])},
        storage_data={MetadataIndex("w", chunk.offsets): _StorageInfo("__0_0.distcp", 0, 8)},
    )
    hostile = st.sampled_from(
        [None, 1, -1, 2**70, "x", [], {}, (), [[[[]]]], _Payload("RAN"), torch.Size([3])]
    )
    kind = draw(st.sampled_from(["field", "nested", "cut", "flip", "clean"]))
    if kind == "field":
        obj = draw(st.sampled_from(["md", "tsm", "chunk", "props", "info"]))
        target = {
            "md": md,
            "tsm": md.state_dict_metadata["w"],
            "chunk": chunk,
            "props": md.state_dict_metadata["w"].properties,
            "info": next(iter(md.storage_data.values())),
        }[obj]
        field = draw(st.sampled_from(sorted(vars(target))))
        object.__setattr__(target, field, draw(hostile))
    elif kind == "nested":
        deep = ()
        for _ in range(draw(st.integers(1, 500))):  # deeper: pickle.dumps recurses too far
            deep = (deep,)
        key = MetadataIndex("w")
        object.__setattr__(key, "offset", deep)
        md.storage_data = {key: "x"} if draw(st.booleans()) else deep
    try:
        data = pickle.dumps(md, protocol=draw(st.integers(2, 5)))
    except Exception:  # noqa: BLE001 (what DCP itself could not pickle)
        data = pickle.dumps(_Payload("RAN"))
    if kind == "cut":
        data = data[: draw(st.integers(0, len(data)))]
    elif kind == "flip":
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :]
    return data


@CI
@given(dcp_metadata())
def test_property_dcp_metadata_is_refused_or_checked(tmp_path_factory, data):
    from torch.distributed.checkpoint.metadata import Metadata

    from metalint.loader import CheckpointError
    from metalint.loader.dcp import read_metadata

    folder = tmp_path_factory.mktemp("dcp")
    (folder / ".metadata").write_bytes(data)
    cwd = os.getcwd()
    os.chdir(folder)  # a payload's relative marker would land here
    try:
        md = read_metadata(str(folder))
        assert type(md) is Metadata
    except CheckpointError as exc:
        msg = str(exc)
        assert "\n" not in msg and str(folder / ".metadata") in msg and len(msg) < 1500
    finally:
        os.chdir(cwd)
    assert not (folder / "RAN").exists()


def test_one_argument_reused_through_the_memo_is_charged_each_time(tmp_path):
    # torch.Size(list) copies its list: 200k calls on one 100k-element list (1.4 MB of
    # pickle) make torch.load's own reader build 2e10 items (160 GB); the stand-in reader
    # charges each copy and refuses the file before torch.load sees it
    big = b"]q\x00(" + b"K\x01" * 100_000 + b"e"  # one list of 100k ints, memoized
    size = b"ctorch\nSize\nq\x01"
    pkl = b"\x80\x02" + big + size + b"h\x01h\x00\x85R" * 200_000 + b"N."
    assert len(pkl) < 2 * 2**20
    path = _torch_zip_with_pkl({"w": torch.zeros(1)}, tmp_path / "m.pt", pkl)
    r, seconds = load_cli(path, tmp_path)
    line = one_line_error(r, [path])
    assert "units of work" in line
    assert seconds < TIMEOUT


def _long(n: int) -> bytes:
    """LONG4 of ``n``."""
    data = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8b" + struct.pack("<i", len(data)) + data


@pytest.mark.parametrize(
    "what,pkl",
    [
        # numel of 10**5000: str() of it raises ValueError (over 4300 digits) in a message
        (
            "storage",
            b"\x80\x02}X\x01\x00\x00\x00w(X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
            b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpu" + _long(10**5000) + b"tQs.",
        ),
        # a top-level key of 10**5000 naming a storage
        (
            "key",
            b"\x80\x02}" + _long(10**5000) + b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
            b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x01tQs.",
        ),
    ],
)
def test_huge_ints_in_data_pkl_are_one_line(tmp_path, what, pkl):
    from metalint.loader import CheckpointError, open_checkpoint

    path = _torch_zip_with_pkl({"w": torch.zeros(1)}, tmp_path / "m.pt", pkl)
    with pytest.raises(CheckpointError) as info:
        open_checkpoint(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_dcp_metadata_index_without_a_name_is_one_line(state, tmp_path):
    from torch.distributed.checkpoint import FileSystemReader

    from metalint.loader import CheckpointError, open_checkpoint

    folder = save_dcp(state, tmp_path / "dcp")
    md = FileSystemReader(str(folder)).read_metadata()
    key = next(iter(md.storage_data))
    object.__setattr__(key, "fqn", None)  # DCP's own reader would hash None happily
    (folder / ".metadata").write_bytes(pickle.dumps(md))
    with pytest.raises(CheckpointError, match=r"\.metadata: DCP metadata refused: "):
        open_checkpoint(folder)


def test_dcp_item_file_that_links_out_of_the_folder_is_refused(state, tmp_path):
    folder = save_dcp(state, tmp_path / "dcp")
    (shard,) = folder.glob("*.distcp")
    outside = tmp_path / "elsewhere.distcp"
    shard.rename(outside)
    shard.symlink_to(outside)
    r, _ = load_cli(folder, tmp_path)
    line = one_line_error(r, [shard])
    assert "is a link out of the checkpoint folder" in line


@pytest.mark.parametrize("suffix", [".safetensors", ".bin"])
def test_folder_file_that_links_out_of_the_folder_is_refused(state, tmp_path, suffix):
    from metalint.loader import save_safetensors

    folder = tmp_path / "ckpt"
    folder.mkdir()
    outside = tmp_path / f"elsewhere{suffix}"
    if suffix == ".bin":
        torch.save(state, outside)
    else:
        save_safetensors(state, outside)
    link = folder / f"model{suffix}"
    link.symlink_to(outside)
    r, _ = load_cli(folder, tmp_path)
    line = one_line_error(r, [link])
    assert "is a link out of the checkpoint folder" in line
