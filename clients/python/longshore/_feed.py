"""The feed client: framing, shared-memory regions, batches, the Loader."""

from __future__ import annotations

import array
import base64
import collections
import errno
import json
import logging
import math
import mmap
import os
import select
import socket
import struct
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Union

import numpy as np

from ._stall import DEFAULT_EVERY as _STALL_EVERY
from ._stall import Stall, StallMeter
from ._token import cut_token

if TYPE_CHECKING:
    import torch

# What Batch.to() takes as a device: "cuda", "cuda:1", torch.device(...), 0.
DeviceLike = Union[str, int, "torch.device"]
# A socket path, or an object naming one (os.PathLike).
PathLike = Union[str, "os.PathLike[str]"]

# 2 adds rollbacks (cluster mode); 3 the sample spec (video, audio: any
# dtype and shape); 4 the trainer's "ended" (it read the end: only then is
# a standalone rank over, so a trainer that stopped short of it and comes
# back from its checkpoint finds its node). A node serving images accepts
# 1 to 4.
PROTOCOL_VERSION = 4

# The dtypes a batch may carry (docs/feed-protocol.md), as NumPy dtypes in
# the node's byte order: it shares this machine. NumPy has no bfloat16:
# such a batch's `images` hold the bits as int16, and its tensors are
# viewed as torch.bfloat16 (_TORCH_VIEWS).
_DTYPES = {"uint8": np.dtype(np.uint8), "float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
           "bfloat16": np.dtype(np.int16)}
_TORCH_VIEWS = {"bfloat16": "bfloat16"}


def _torch_view(t, name):
    """t (over a batch's memory, of its NumPy dtype) as the batch's torch
    dtype: the same memory, no copy."""
    view = _TORCH_VIEWS.get(name)
    if view is None:
        return t
    import torch

    return t.view(getattr(torch, view))


def _dtype(name):
    dt = _DTYPES.get(name or "uint8")
    if dt is None:
        raise FeedError("protocol", f"batch dtype {name!r}: this client knows {sorted(_DTYPES)}")
    return dt

# message types (docs/feed-protocol.md)
HELLO, RELEASE, COMMIT, BYE, ENDED = 1, 2, 3, 4, 5
WELCOME, REGION, BATCH, COMMITTED, EPOCH_END, END, ERROR, ROLLBACK = 16, 17, 18, 19, 20, 21, 22, 23
DEVICE_REGION = 24
FIELDS = 25  # binary: a batch's fields (docs/feed-protocol.md, "Fields")

MAX_SERVER_FRAME = 16 << 20
MAX_FIELDS_FRAME = 1 << 30
_FIELD_CODES = {"int": 1, "float": 2, "string": 3, "bytes": 4, "list<int>": 5, "list<float>": 6, "list<string>": 7}
_FIELDS_HEAD = struct.Struct("<QII")


RAW_HEADER = 8  # a raw row's bytes before its sample's (docs/feed-protocol.md, "Raw samples")


def _raw_rows(flat, dims, lengths):
    """The samples of a raw batch (--media raw): row r of `flat` (uint8,
    `dims` [N, R]) holds lengths[r] bytes after its header. memoryviews
    of the shared memory, no copy: each keeps the slot (as the images
    array does) until it is gone."""
    if flat is None:
        if lengths:
            raise FeedError("protocol", f"{len(lengths)} raw lengths for an empty batch")
        return []
    if len(dims) != 2 or dims[0] != len(lengths) or dims[1] < RAW_HEADER:
        raise FeedError("protocol", f"raw batch of shape {list(dims)} with {len(lengths)} lengths")
    stride, mv = dims[1], memoryview(flat)
    rows = []
    for r, n in enumerate(lengths):
        if not 0 <= n <= stride - RAW_HEADER:
            raise FeedError("protocol", f"raw row {r} of {stride} bytes says it holds {n}")
        lo = r * stride + RAW_HEADER
        rows.append(mv[lo:lo + n])
    return rows


def _parse_fields(payload, schema):
    """A fields frame's payload -> (batch id, {name: values}, {name:
    present}). Numeric scalars are torch tensors (int64, float64; absent
    rows 0), NumPy arrays without torch; strings a list of str, bytes a
    list of memoryviews into the payload (no copy), lists lists; an absent
    row is None in a list."""
    mv = memoryview(payload)
    if len(mv) < _FIELDS_HEAD.size:
        raise FeedError("protocol", "fields frame too short")
    bid, rows, cols = _FIELDS_HEAD.unpack_from(mv, 0)
    if cols != len(schema):
        raise FeedError("protocol", f"fields frame of {cols} columns for a schema of {len(schema)}")
    off = _FIELDS_HEAD.size
    torch = _try_torch()
    values, present = {}, {}

    def take(n):
        nonlocal off
        if n < 0 or off + n > len(mv):
            raise FeedError("protocol", "fields frame cut short")
        out = mv[off:off + n]
        off += n
        return out

    def ends(n):
        return np.frombuffer(take(4 * n), dtype="<u4").astype(np.int64)

    for spec in schema:
        name, typ = spec["name"], spec["type"]
        code = take(1)[0]
        if _FIELD_CODES.get(typ) != code:
            raise FeedError("protocol", f"field {name!r}: type code {code}, the schema says {typ}")
        bits = np.frombuffer(take((rows + 7) // 8), dtype=np.uint8)
        have = np.unpackbits(bits, bitorder="little")[:rows].astype(bool).tolist()
        present[name] = have
        if typ in ("int", "float"):
            arr = np.frombuffer(take(8 * rows), dtype="<i8" if typ == "int" else "<f8").copy()
            values[name] = torch.from_numpy(arr) if torch is not None else arr
        elif typ in ("string", "bytes"):
            e = ends(rows)
            data = take(int(e[-1]) if rows else 0)
            out, lo = [], 0
            for r in range(rows):
                hi = int(e[r])
                if not have[r]:
                    out.append(None)
                elif typ == "string":
                    out.append(str(data[lo:hi], "utf-8"))
                else:
                    out.append(data[lo:hi])
                lo = hi
            values[name] = out
        elif typ in ("list<int>", "list<float>"):
            e = ends(rows)
            n = int(e[-1]) if rows else 0
            elems = np.frombuffer(take(8 * n), dtype="<i8" if typ == "list<int>" else "<f8").tolist()
            out, lo = [], 0
            for r in range(rows):
                hi = int(e[r])
                out.append(elems[lo:hi] if have[r] else None)
                lo = hi
            values[name] = out
        else:  # list<string>
            e = ends(rows)
            n = int(e[-1]) if rows else 0
            se = ends(n)
            data = take(int(se[-1]) if n else 0)
            out, lo = [], 0
            for r in range(rows):
                hi = int(e[r])
                if have[r]:
                    out.append([str(data[(int(se[k - 1]) if k else 0):int(se[k])], "utf-8") for k in range(lo, hi)])
                else:
                    out.append(None)
                lo = hi
            values[name] = out
    if off != len(mv):
        raise FeedError("protocol", f"{len(mv) - off} bytes after a fields frame's last column")
    return bid, values, present
_HDR = struct.Struct("<I")
_ANC = socket.CMSG_SPACE(16 * 4)  # room for the descriptors of one region message
# One release frame for one batch, the trainer's every-batch message: built
# with %-formatting, not json.dumps (a fraction of its cost).
_RELEASE1 = b'{"ids":[%d]}'


class FeedError(RuntimeError):
    """An error message from the node (code, message, fatal, report)."""

    def __init__(self, code: Optional[str], message: Optional[str], fatal: bool = True, report: Any = None) -> None:
        super().__init__(f"longshore feed: {code}: {message}")
        self.code, self.message, self.fatal, self.report = code, message, fatal, report


class ConnectTimeout(FeedError, TimeoutError):
    """No node accepted on `path` within the connect timeout: `attempts`
    connects over `waited` seconds each found no socket (ENOENT) or one
    nobody accepts on (ECONNREFUSED); the last one's error is the
    `__cause__`. Code "connect". Also a TimeoutError (an OSError), so code
    that caught the connect's OSError before the loader waited still
    catches it."""

    def __init__(self, path: str, attempts: int, waited: float, last: BaseException) -> None:
        super().__init__(
            "connect",
            f"no node accepting on {path}: {attempts} attempt(s) over {waited:.1f} s, the last: {last} "
            f"(is the node running, with this feed directory and rank? connect_timeout= or "
            f"${CONNECT_TIMEOUT_ENV} sets how long to wait)")
        self.path, self.attempts, self.waited = path, attempts, waited


# How long a loader waits for a node that is not accepting yet (one being
# launched beside the trainer), unless Loader(connect_timeout=) or the
# environment says otherwise.
DEFAULT_CONNECT_TIMEOUT = 60.0
CONNECT_TIMEOUT_ENV = "LONGSHORE_CONNECT_TIMEOUT"

_log = logging.getLogger("longshore")


def _connect_timeout(value):
    """The connect timeout in seconds: value, else $LONGSHORE_CONNECT_TIMEOUT,
    else DEFAULT_CONNECT_TIMEOUT."""
    if value is None:
        env = os.environ.get(CONNECT_TIMEOUT_ENV)
        if env is None or env == "":
            return DEFAULT_CONNECT_TIMEOUT
        try:
            value = float(env)
        except ValueError:
            raise ValueError(f"${CONNECT_TIMEOUT_ENV}={env!r}: want seconds (a number)") from None
    value = float(value)
    if math.isnan(value):
        raise ValueError("connect_timeout is NaN: want seconds")
    return value


def _connect_unix(path, timeout, connect_timeout):
    """A socket connected to path, trying again while no node accepts there
    (ENOENT: no socket yet; ECONNREFUSED: a socket nobody accepts on, a node
    starting or restarting) with a short backoff, until connect_timeout
    seconds have passed (<= 0: one attempt); then ConnectTimeout."""
    start = time.monotonic()
    backoff, attempts = 0.005, 0
    while True:
        attempts += 1
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(path)
        except OSError as e:
            s.close()
            if e.errno not in (errno.ENOENT, errno.ECONNREFUSED):
                raise
            waited = time.monotonic() - start
            left = connect_timeout - waited
            if left <= 0:
                raise ConnectTimeout(path, attempts, waited, e) from e
            if attempts == 1:
                _log.info("longshore: waiting up to %.0f s for the node at %s (%s)", connect_timeout, path,
                          os.strerror(e.errno))
        else:
            try:
                _check_node(s, path)
            except BaseException:
                s.close()
                raise
            return s
        time.sleep(min(backoff, left))
        backoff = min(backoff * 2, 0.25)


NODE_UID_ENV = "LONGSHORE_NODE_UID"


class NodeRefused(FeedError):
    """The socket is served by a process of a user this trainer does not
    accept as its node (not its own user, root, or one named in
    $LONGSHORE_NODE_UID): anyone who can write to the feed directory could
    otherwise serve the trainer data of their own."""

    def __init__(self, path: str, uid: int) -> None:
        super().__init__("node_refused",
                         f"{path} is served by a process of uid {uid}, not this user (uid {os.getuid()}), root "
                         f"or ${NODE_UID_ENV}: refusing it (if the node runs as that user, set {NODE_UID_ENV}={uid})",
                         fatal=True)
        self.path, self.uid = path, uid


def _node_uids():
    """The users $LONGSHORE_NODE_UID accepts as the node (None: any)."""
    env = os.environ.get(NODE_UID_ENV, "").strip()
    if env == "any":
        return None
    if not env:
        return set()
    try:
        return {int(f) for f in env.split(",")}
    except ValueError:
        raise ValueError(f"${NODE_UID_ENV}={env!r}: want uids separated by commas, or any") from None


def _check_node(s, path):
    """Refuses a socket whose server (SO_PEERCRED) is not this user, root or
    a user $LONGSHORE_NODE_UID names."""
    allowed = _node_uids()
    _pid, uid, _gid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if allowed is None or uid in (os.getuid(), 0) or uid in allowed:
        return
    raise NodeRefused(path, uid)


class RolledBack(FeedError):
    """The rank rolled back (cluster mode: the coordinator restarted or
    the node was evicted): batches after the rank's last acknowledged
    commit will be delivered again. Restore the model saved with that
    commit -- `epoch`, `step`, `token` (`committed` False: there is none,
    restore the initial model) -- then keep iterating: the next batches
    continue at `step + 1`. Also raised by `commit()` when the commit's
    batch belongs to a delivery era that ended (then `epoch`/`step` are
    None until the loader reads the rollback itself)."""

    def __init__(self, epoch: Optional[int] = None, step: Optional[int] = None, token: Optional[bytes] = None,
                 committed: bool = False, message: Optional[str] = None) -> None:
        if message is None:
            message = (f"rolled back: restore the checkpoint of epoch {epoch} step {step}"
                       if committed else "rolled back before any acknowledged commit: restore the initial model")
        super().__init__("rolled_back", message, fatal=False)
        self.epoch, self.step, self.token, self.committed = epoch, step, token, committed


# Where a trainer learns its local rank when it is not told: torchrun (and
# Lightning, Accelerate, DeepSpeed launchers) set LOCAL_RANK; plain srun
# sets SLURM_LOCALID.
RANK_ENV = ("LOCAL_RANK", "SLURM_LOCALID")


def env_rank() -> int:
    """This process's local rank from the launcher: $LOCAL_RANK, else
    $SLURM_LOCALID, else 0."""
    for var in RANK_ENV:
        v = os.environ.get(var)
        if v is None or v.strip() == "":
            continue
        try:
            r = int(v)
        except ValueError:
            raise ValueError(f"${var}={v!r}: want the local rank, a number >= 0") from None
        if r < 0:
            raise ValueError(f"${var}={v!r}: want the local rank, a number >= 0")
        return r
    return 0


def socket_path(rank: Optional[int] = None, directory: Optional[PathLike] = None) -> str:
    """The socket of `rank` (default: env_rank(): $LOCAL_RANK, else
    $SLURM_LOCALID, else 0) in `directory` (default: $LONGSHORE_FEED_DIR,
    else $XDG_RUNTIME_DIR/longshore, else /tmp/longshore-<uid>), the
    node's defaults."""
    if rank is None:
        rank = env_rank()
    if directory is None:
        directory = os.environ.get("LONGSHORE_FEED_DIR")
    if not directory:
        xdg = os.environ.get("XDG_RUNTIME_DIR")
        directory = os.path.join(xdg, "longshore") if xdg else f"/tmp/longshore-{os.getuid()}"
    return os.path.join(os.fspath(directory), f"rank-{rank}.sock")


def _distributed():
    """torch.distributed when it is initialized with more than one rank, else None."""
    try:
        import torch.distributed as dist
    except Exception:  # torch is optional
        return None
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def _cuda_array(ptr, dims, owner, index, dtype=np.dtype(np.uint8)):
    from ._cuda import CudaArray

    return CudaArray(ptr, dims, owner, index, dtype.str)


def _try_torch():
    try:
        import torch  # noqa: F401

        return torch
    except Exception:  # torch is optional
        return None


class Batch:
    """One batch. `images` is a NumPy array over the node's shared memory
    (no copy) of the batch's dtype and shape in `layout`: uint8 [N,3,H,W]
    ("NCHW") or [N,H,W,3] ("NHWC") images (float16, or bfloat16 held as
    int16 bits, when the node converts them: --dtype; `tensor()` is then
    torch.float16 or torch.bfloat16; `dtype` names it), uint8 [N,T,3,H,W] ("NTCHW") or
    [N,T,H,W,3] ("NTHWC") video clips, float32 [N,C,S] ("NCS") audio;
    `tensor()` is the same memory as a torch tensor. `short[i]` says
    sample i was shorter than its window (video and audio: padded).
    `filled[i]` says row i holds no sample of its own: a failed sample's
    place, filled by the node with a copy of the next unfilled row so the
    batch keeps its shape; `valid` (a bool tensor, `mask` the same) is
    its negation, to leave filled rows out of a loss. A raw batch (node
    --media raw) is uint8 [N,R] rows, and `data` (also batch["data"]) is
    each row's sample, a memoryview of its bytes. The slot goes back to
    the node when `release()` is called or when the images array and every
    view of it (including tensors from `tensor()` and `cuda()`) are gone.

    `cuda()` is the batch on the GPU: with device delivery (Loader
    device="cuda") a CUDA tensor over the node's device slot, no copy;
    otherwise an asynchronous copy from the (pinned, with pin_memory=True)
    shared memory on the current stream. Either way the slot's release
    waits until the device work enqueued so far on the current stream has
    run (an event), so the node never overwrites memory a queued kernel
    or copy still reads."""

    __slots__ = ("id", "epoch", "step", "images", "labels", "keys", "indices",
                 "positions", "pads", "failed", "filled", "layout", "short", "era", "end_of_stream", "device_array",
                 "fields", "present", "data", "dtype", "_release", "_gate", "_cuda", "_index", "__weakref__")

    def __init__(self, desc, images, release, device_array=None, gate=None, cuda=None, index=None, fields=None,
                 present=None, data=None):
        self.id = desc["id"]
        self.epoch = desc["epoch"]
        self.step = desc["step"]
        self.images = images
        self.labels = np.asarray(desc.get("labels") or [], dtype=np.int64)
        self.keys = desc.get("keys") or []
        self.indices = desc.get("indices") or []
        self.positions = desc.get("positions") or []
        self.pads = desc.get("pads") or []
        self.failed = desc.get("failed", 0)
        self.layout = desc.get("layout", "NCHW")
        self.dtype = desc.get("dtype") or "uint8"  # the node's name: uint8, float16, bfloat16, float32
        self.short = desc.get("short") or [False] * len(self.keys)
        # rows filled with a copy of another in a failed sample's place
        # (absent: none, or a node that never fills)
        self.filled = [bool(f) for f in desc.get("filled") or ()] or [False] * len(self.keys)
        if len(self.filled) != len(self.keys):
            raise FeedError("protocol", f"batch of {len(self.keys)} samples with {len(self.filled)} filled marks")
        # cluster mode (version 2): the delivery era, and whether this is
        # the rank's last batch of the epoch as planned now (commit it)
        self.era = desc.get("era", 0)
        self.end_of_stream = bool(desc.get("end_of_stream", False))
        # device delivery: a __cuda_array_interface__ object over the
        # node's device slot (None: the batch is in host memory only)
        self.device_array = device_array
        self._release = release
        self._gate = gate  # [event or None]: what the release waits for
        self._cuda = cuda
        self._index = index
        # the samples' fields by name (docs/fields.md), and which rows have
        # each: {} for a dataset without fields
        self.fields: Dict[str, Any] = fields or {}
        self.present: Dict[str, List[bool]] = present or {}
        # raw batches (--media raw): each row's sample, the object's bytes
        # as stored, a memoryview of the shared memory (no copy; bytes(v)
        # to keep one past the batch); also batch["data"]. None for other
        # kinds.
        self.data: Optional[List[memoryview]] = data

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, name: str) -> Any:
        """Dict-like access, as a DataLoader over a dataset of dicts gives:
        "image" (also "images") the batch as a tensor (`tensor()`),
        "label" (also "labels") the labels as an int64 tensor, "key" the
        sample keys, "index" their dataset indices, any other name the
        field of that name (`fields[name]`)."""
        return _item(self, name, self.tensor, self.labels)

    def __contains__(self, name: str) -> bool:
        return name in _BUILTIN_ITEMS or name in self.fields

    def tensor(self) -> torch.Tensor:
        """The batch as a torch tensor (its dtype, its shape) sharing the
        shared memory."""
        import torch

        return _torch_view(torch.from_numpy(self.images), self.dtype)

    @property
    def valid(self) -> torch.Tensor:
        """A bool tensor [N]: True for the rows that are samples, False
        for the filled ones (`filled`). With `loss = (per_sample *
        valid).sum() / valid.sum()` the filled copies do not count."""
        import torch

        return torch.tensor([not f for f in self.filled], dtype=torch.bool)

    @property
    def mask(self) -> torch.Tensor:
        """The same as `valid`."""
        return self.valid

    @property
    def on_device(self) -> bool:
        """Whether the batch was delivered on the device (CUDA IPC)."""
        return self.device_array is not None

    def cuda(self, non_blocking: bool = True) -> torch.Tensor:
        """The batch as a CUDA tensor: the node's device slot itself
        with device delivery, else a copy from shared memory enqueued on
        the current stream (asynchronous when the memory is pinned:
        Loader(pin_memory=True)). Kernels on the current stream see the
        data in order; another stream must wait_stream() first."""
        if self._cuda is None:
            raise RuntimeError("longshore: Batch.cuda() needs the loader's CUDA (Loader(pin_memory=True) or device='cuda')")
        if self.device_array is not None:
            return _torch_view(self._cuda.as_tensor(self.device_array, self._index), self.dtype)
        t, ev = self._cuda.to_device(self, self._index, non_blocking)
        if self._gate is not None:
            self._gate[0] = ev  # the slot is read by the copy until ev completes
        return t

    def to(self, device: DeviceLike, non_blocking: bool = False) -> TorchBatch:
        """The batch moved to `device` as torch tensors (what PyTorch
        Lightning's and Accelerate's device transfer call): a TorchBatch
        whose `images` and `labels` (int64) are on the device and whose
        other fields are this batch's. On the CPU `images` is the shared
        memory itself (no copy). To CUDA it is `cuda()` when the loader has
        its CUDA (pin_memory=True or device="cuda": the node's device slot,
        or an asynchronous copy on the current stream, the release gated
        on it), else a copy from the pageable shared memory, which is
        complete when it returns. Release the slot with either batch's
        `release()`."""
        import torch

        dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        if dev.type == "cuda" and self._cuda is not None:
            images = self.cuda(non_blocking=non_blocking)
            if dev.index is not None and images.device != dev:
                images = images.to(dev, non_blocking=non_blocking)
        else:
            images = self.tensor()
            if dev.type != "cpu":
                images = images.to(dev, non_blocking=non_blocking)
        labels = torch.from_numpy(self.labels)
        valid = self.valid
        if dev.type != "cpu":
            labels = labels.to(dev, non_blocking=non_blocking)
            valid = valid.to(dev, non_blocking=non_blocking)
        return TorchBatch(self, images, labels, dev, valid)

    def release(self) -> None:
        """Give the slot back: at once, or, after cuda(), once the device
        work enqueued so far on the current stream has run. The arrays and
        tensors must not be used afterwards."""
        self._release()

    def __repr__(self) -> str:
        return f"Batch(epoch={self.epoch}, step={self.step}, n={len(self)}, dims={tuple(self.images.shape)})"


_BUILTIN_ITEMS = ("image", "images", "label", "labels", "key", "index")


def _item(b, name, images, labels):
    if name in ("image", "images"):
        return images()
    if name in ("label", "labels"):
        import torch

        return labels if isinstance(labels, torch.Tensor) else torch.from_numpy(labels)
    if name == "key":
        return b.keys
    if name == "index":
        return b.indices
    try:
        return b.fields[name]
    except KeyError:
        raise KeyError(f"{name!r}: not image, label, key, index nor one of the batch's fields {sorted(b.fields)}") from None


class TorchBatch:
    """A batch on a torch device, from `Batch.to(device)`: `images` (the
    batch's dtype and shape), `labels` (int64) and `valid` (bool, False
    for filled rows; `mask` the same) are torch tensors on `device`;
    `batch` is the Batch it came from, whose fields (`epoch`,
    `step`, `keys`, `short`, `end_of_stream`, ...) it repeats. Its slot
    goes back with `release()` (or when the tensors and the batch are
    gone), as for the Batch. `to()` moves it again."""

    __slots__ = ("batch", "images", "labels", "device", "valid")

    def __init__(self, batch: Batch, images: torch.Tensor, labels: torch.Tensor, device: torch.device,
                 valid: Optional[torch.Tensor] = None) -> None:
        self.batch, self.images, self.labels, self.device = batch, images, labels, device
        self.valid = valid if valid is not None else batch.valid.to(device)

    @property
    def mask(self) -> torch.Tensor:
        """The same as `valid`."""
        return self.valid

    @property
    def fields(self) -> Dict[str, Any]:
        """The samples' fields (Batch.fields; numeric ones stay on the CPU)."""
        return self.batch.fields

    def __getitem__(self, name: str) -> Any:
        """As Batch's: "image" and "label" are this batch's tensors on
        `device`."""
        return _item(self.batch, name, lambda: self.images, self.labels)

    def __contains__(self, name: str) -> bool:
        return name in self.batch

    @property
    def filled(self) -> List[bool]:
        """Which rows are copies in failed samples' places (Batch.filled)."""
        return self.batch.filled

    @property
    def id(self) -> int:
        """The batch's id (the node's)."""
        return self.batch.id

    @property
    def epoch(self) -> int:
        """The batch's epoch."""
        return self.batch.epoch

    @property
    def step(self) -> int:
        """The batch's step in its epoch."""
        return self.batch.step

    @property
    def keys(self) -> List[str]:
        """The samples' keys."""
        return self.batch.keys

    @property
    def indices(self) -> List[int]:
        """The samples' indices in the dataset."""
        return self.batch.indices

    @property
    def positions(self) -> List[int]:
        """The samples' positions in the rank's stream."""
        return self.batch.positions

    @property
    def pads(self) -> List[bool]:
        """Which samples repeat others to fill the epoch's last batch."""
        return self.batch.pads

    @property
    def failed(self) -> int:
        """How many samples of the batch failed to load."""
        return self.batch.failed

    @property
    def layout(self) -> str:
        """The images' layout (NCHW, NHWC, ...)."""
        return self.batch.layout

    @property
    def short(self) -> List[bool]:
        """Which samples were shorter than their window (video, audio)."""
        return self.batch.short

    @property
    def era(self) -> int:
        """The delivery era (cluster mode)."""
        return self.batch.era

    @property
    def end_of_stream(self) -> bool:
        """The rank's last batch of the epoch as planned now (cluster mode): commit it."""
        return self.batch.end_of_stream

    def __len__(self) -> int:
        return len(self.batch)

    def to(self, device: DeviceLike, non_blocking: bool = False) -> TorchBatch:
        """This batch's tensors moved to `device`."""
        import torch

        dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        return TorchBatch(self.batch, self.images.to(dev, non_blocking=non_blocking),
                          self.labels.to(dev, non_blocking=non_blocking), dev,
                          self.valid.to(dev, non_blocking=non_blocking))

    def release(self) -> None:
        """Give the slot back (Batch.release)."""
        self.batch.release()

    def __repr__(self) -> str:
        return (f"TorchBatch(epoch={self.epoch}, step={self.step}, n={len(self)}, "
                f"shape={tuple(self.images.shape)}, device={self.device})")


class _Conn:
    """One connection: framing over a Unix socket, descriptor passing, the
    shared regions it announced. Reads happen on the Loader's thread;
    releases may be queued from any thread (finalizers) and are flushed
    before each read and write."""

    def __init__(self, path, token=None, rank=None, timeout=None, device=None, cuda=None, pin=False,
                 connect_timeout=DEFAULT_CONNECT_TIMEOUT, fields=True):
        self.sock = _connect_unix(path, timeout, connect_timeout)
        self.buf = bytearray()
        self.rbuf = memoryview(bytearray(1 << 16))  # reused receive buffer
        self.fds = collections.deque()
        self.regions = {}  # id -> (mmap, memoryview)
        self.dev_regions = {}  # id -> (device pointer, size, device index), imported over CUDA IPC
        self.cuda = cuda
        self.pin = pin
        self.pinned = []  # addresses of regions page-locked in this process
        self.pin_failed = 0
        self.dev_index = None  # this process's index of the welcome's device
        self.pending_release = collections.deque()  # (id, gate): gate None or [event or None]
        self.stalls = collections.deque()  # stall reports to send on the next releases
        self.wlock = threading.Lock()
        self.closed = False
        self.said_ended = False  # "ended" sent (version 4)
        hello = {"version": PROTOCOL_VERSION, "client": "python"}
        if rank is not None:
            hello["rank"] = rank
        if token:
            hello["token"] = base64.b64encode(token).decode()
        if device:
            hello["device"] = device
        self.fields = bool(fields)
        if fields:
            hello["fields"] = True
        self.send(HELLO, hello)
        t, w = self.read()
        if t == ERROR:
            raise FeedError(w.get("code"), w.get("message"), True, w.get("report"))
        if t != WELCOME:
            raise FeedError("protocol", f"expected welcome, got type {t}")
        if w.get("version") not in (1, 2, 3, PROTOCOL_VERSION):
            raise FeedError("version", f"server speaks version {w.get('version')}")
        self.welcome = w

    def send(self, t, obj):
        self._send(t, json.dumps(obj, separators=(",", ":")).encode())

    def _send(self, t, body):
        frame = _HDR.pack(len(body) + 1) + bytes((t,)) + body
        with self.wlock:
            self.sock.sendall(frame)

    def queue_release(self, bid, gate=None):
        # called from finalizers: no I/O here (it may run inside a send)
        self.pending_release.append((bid, gate))

    def gated(self):
        """Releases waiting for device work."""
        return sum(1 for _, g in self.pending_release if g is not None and g[0] is not None)

    def flush_releases(self, wait=0):
        """Send the releases whose device work has run; with wait=k, first
        wait for the oldest k gated ones (wait=-1: all of them)."""
        pending = self.pending_release
        if not pending:
            return
        if len(pending) == 1:
            bid, gate = pending[0]
            if gate is None or gate[0] is None:
                # The common case, a batch a step: one release, nothing to
                # wait for. (Only this thread pops; a finalizer queueing
                # another release meanwhile appends behind this one.)
                pending.popleft()
                if not self.closed:
                    if self.stalls:
                        self.send(RELEASE, {"ids": [bid], "stall": self.stalls.popleft()})
                    else:
                        self._send(RELEASE, _RELEASE1 % bid)
                return
        ids, keep = [], collections.deque()
        while True:
            try:
                bid, gate = self.pending_release.popleft()
            except IndexError:
                break
            ev = gate[0] if gate is not None else None
            if ev is not None and wait != 0:
                ev.synchronize()
                wait -= 1
            elif ev is not None and not ev.query():
                keep.append((bid, gate))
                continue
            ids.append(bid)
        self.pending_release.extendleft(reversed(keep))
        if ids and not self.closed:
            for i in range(0, len(ids), 4096):
                msg = {"ids": ids[i:i + 4096]}
                if self.stalls:
                    msg["stall"] = self.stalls.popleft()
                self.send(RELEASE, msg)

    def flush_stalls(self):
        """Send the stall reports no release took, each on a release of
        no batches (which any node takes: it ignores fields it does not
        know)."""
        while self.stalls and not self.closed:
            self.send(RELEASE, {"ids": [], "stall": self.stalls.popleft()})

    def readable(self):
        """Whether a whole frame, or bytes toward one, are here already."""
        if len(self.buf) >= 5 and len(self.buf) >= 4 + _HDR.unpack_from(self.buf)[0]:
            return True
        r, _, _ = select.select([self.sock], [], [], 0)
        return bool(r)

    def _fill(self, n):
        while len(self.buf) < n:
            k, anc, _, _ = self.sock.recvmsg_into([self.rbuf], _ANC)
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                    self.fds.extend(fds)
            if not k:
                raise EOFError("longshore feed: connection closed by the node")
            self.buf += self.rbuf[:k]

    def read(self):
        """Next message (type, payload dict); region messages are mapped
        here and never returned."""
        buf = self.buf
        while True:
            if len(buf) < 5:
                self._fill(5)
            (n,) = _HDR.unpack_from(buf)
            if n == 0 or n > (MAX_FIELDS_FRAME if self.fields else MAX_SERVER_FRAME):
                raise FeedError("protocol", f"bad frame length {n}")
            if len(buf) < 4 + n:
                self._fill(4 + n)
            t = buf[4]
            if t == FIELDS:  # binary: its bytes fields are views into this copy
                payload = bytes(buf[5:4 + n])
                del buf[:4 + n]
                return t, payload
            # json.loads takes the bytearray slice as it is (one copy, not two)
            payload = json.loads(buf[5:4 + n]) if n > 1 else {}
            del buf[:4 + n]
            if t == REGION:
                self._map(payload)
            elif t == DEVICE_REGION:
                self._import(payload)
            else:
                return t, payload

    def _map(self, r):
        if not self.fds:
            raise FeedError("protocol", "region message without a file descriptor")
        fd = self.fds.popleft()
        try:
            mm = mmap.mmap(fd, r["size"], flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)  # the mapping keeps the memory
        self.regions[r["region"]] = mm
        if self.pin and self.cuda is not None:
            addr = np.frombuffer(mm, dtype=np.uint8).ctypes.data
            if self.cuda.host_register(addr, r["size"]):
                self.pinned.append(addr)
            else:
                self.pin_failed += 1  # copies from it stay pageable (synchronous)

    def _import(self, r):
        if self.cuda is None:
            raise FeedError("protocol", "device region sent to a trainer that did not ask for device batches")
        index = self.cuda.device_index(r.get("device"))
        handle = base64.b64decode(r["handle"])
        if len(handle) != 64:
            raise FeedError("protocol", f"device region handle of {len(handle)} bytes, want 64")
        self.dev_regions[r["region"]] = (self.cuda.ipc_open(handle, index), r["size"], index)

    def close(self):
        if self.closed:
            return
        try:
            # The lifetime rule: give every slot back once the device work
            # reading it has run, close the IPC imports, then leave; the
            # node frees its device slots only after that.
            self.flush_releases(wait=-1)
            self.flush_stalls()
        except OSError:
            pass
        for ptr, _, index in self.dev_regions.values():
            self.cuda.ipc_close(ptr, index)
        self.dev_regions = {}
        for addr in self.pinned:
            self.cuda.host_unregister(addr)
        self.pinned = []
        try:
            self.send(BYE, {})
        except OSError:
            pass
        self.closed = True
        self.sock.close()
        while self.fds:
            os.close(self.fds.popleft())
        # regions are unmapped when the last array over them is gone
        self.regions = {}


class Loader:
    """Iterates batches from one rank's node feed.

    `socket_or_rank`: a socket path, a rank number (socket in
    $LONGSHORE_FEED_DIR), or None: the rank is `rank` if given, else
    $LOCAL_RANK (torchrun), else $SLURM_LOCALID (srun), else 0. A loader
    that knows its rank says it in its hello (the node refuses a trainer
    at another rank's socket); `rank` with a path names the rank that
    socket serves. `loader.rank` is the rank (None: a path alone).

    `for batch in loader` yields one epoch (the rest of the current one
    after a resume); iterate again for the next. `len(loader)` is the
    number of batches (steps) of a whole epoch for this rank, as the node
    said at connection (it connects); a node that does not know it
    (cluster mode: the coordinator plans a rank's share as the job runs)
    makes it raise TypeError, like any unsized iterable.

    The loader connects when it first needs the node and waits for a node
    that is starting, up to `connect_timeout` seconds (default
    $LONGSHORE_CONNECT_TIMEOUT, else 60; 0: one attempt), then raises
    ConnectTimeout naming the socket. In cluster mode iteration
    raises `RolledBack` when the rank rolls back: restore the checkpoint it
    names and iterate again; `commit()` blocks until the coordinator
    acknowledges the commit. `batches()` yields every
    remaining batch of the job. `commit()` after a checkpoint; `state_dict()`
    commits and returns the position, `load_state_dict()` resumes there
    (like torchdata's StatefulDataLoader).

    Batches are released when dropped or by `Batch.release()`; with
    `release_previous=True` each batch is released when the next one is
    taken (for loops that never keep a batch longer).

    GPU trainers (see the README's "Feeding a GPU"): `pin_memory=True`
    page-locks the shared memory in this process (cudaHostRegister), so
    `batch.cuda()` (or `batch.tensor().cuda(non_blocking=True)`) is an
    asynchronous DMA; `device="cuda"` asks a node run with `--upload
    device` for batches on the device (CUDA IPC): `batch.cuda()` is then
    the node's device slot itself. `cuda` is the device seam (default:
    longshore._cuda.TorchCuda), for tests.

    Data-stall accounting: the loader times, per step, how long the
    trainer waited for its batch (from asking for it, `next()`, to having
    it) and how long it spent before asking for the next (its compute),
    and reports them to the node every `stall_every` steps on a release
    (the node's metrics, summary and the coordinator's status page show
    the stall share). `loader.stall` is its own tally. `clock` is the
    monotonic clock it reads, in seconds (default time.monotonic), for
    tests.
    """

    def __init__(self, socket_or_rank: Union[PathLike, int, None] = None, *, rank: Optional[int] = None,
                 token: Optional[bytes] = None, timeout: Optional[float] = None, release_previous: bool = False,
                 pin_memory: bool = False, device: Optional[str] = None, cuda: Any = None,
                 connect_timeout: Optional[float] = None, clock: Optional[Callable[[], float]] = None,
                 stall_every: int = _STALL_EVERY, fields: bool = True) -> None:
        if isinstance(socket_or_rank, int) and not isinstance(socket_or_rank, bool):
            if rank is not None and rank != socket_or_rank:
                raise ValueError(f"rank given twice: {socket_or_rank} and rank={rank}")
            rank = socket_or_rank
            socket_or_rank = None
        if rank is not None and (not isinstance(rank, int) or rank < 0):
            raise ValueError(f"rank {rank!r}: want a number >= 0")
        if socket_or_rank is None:
            if rank is None:
                rank = env_rank()
            self.path = socket_path(rank)
        else:
            self.path = os.fspath(socket_or_rank)
        self.rank: Optional[int] = rank
        self.timeout = timeout
        self.connect_timeout = _connect_timeout(connect_timeout)
        self.release_previous = release_previous
        self._token = token
        self._conn = None
        self._queue = collections.deque()  # messages read while waiting for a commit answer
        self._req = 0
        self._last = None  # (epoch, step) of the last batch handed out
        self._committed = None  # (epoch, step, token)
        self._ended = False
        self._prev = None
        self._epoch_ended = None
        self._era = 0  # delivery era of the last batch handed out (cluster mode)
        self.rollbacks = 0
        if device not in (None, "cuda"):
            raise ValueError(f"device {device!r}: want None or 'cuda'")
        self.pin_memory = pin_memory
        self.device = device
        self._cuda = cuda
        self._stall = StallMeter(clock, stall_every)
        self.fields = fields
        self._fields = None  # the fields frame read, for the batch that follows

    # -- connection ---------------------------------------------------------

    def _connect(self):
        if self._conn is None:
            if self._cuda is None and (self.pin_memory or self.device):
                from ._cuda import TorchCuda

                self._cuda = TorchCuda()
            self._conn = _Conn(self.path, token=self._token, rank=self.rank, timeout=self.timeout, device=self.device,
                               cuda=self._cuda, pin=self.pin_memory, connect_timeout=self.connect_timeout,
                               fields=self.fields)
            self._fields = None
            self._ended = False
            w = self._conn.welcome
            self._era = w.get("era", 0)
            c = w.get("committed")
            if c and c.get("committed"):
                self._committed = (c["epoch"], c["step"], base64.b64decode(c.get("token") or b""))
        return self._conn

    @property
    def welcome(self) -> Dict[str, Any]:
        """What the node said at connection (batch size, sample shape, resume point)."""
        return self._connect().welcome

    def __len__(self) -> int:
        """Batches (steps) in a whole epoch of this rank's stream, from the
        welcome (connecting first). TypeError when the node does not say
        (cluster mode, an older node)."""
        w = self._connect().welcome
        n = w.get("epoch_steps")
        if not n:
            why = ("cluster mode: the coordinator plans a rank's share as the job runs"
                   if w.get("mode") == "cluster" else "a node older than this client")
            raise TypeError(f"longshore: the node did not say how many steps an epoch of this rank has ({why}): "
                            f"this loader has no len()")
        return int(n)

    def __bool__(self) -> bool:
        return True  # not len(): a loader is truthy whether or not it is sized or connected

    def close(self) -> None:
        if self._conn is not None:
            if not self._conn.closed:
                while True:  # the steps not yet reported go with the goodbye
                    r = self._stall.take()
                    if r is None:
                        break
                    self._conn.stalls.append(r)
            self._conn.close()
            self._conn = None

    def headspace(self, steps: int = 32, cache: int = 4) -> Iterator[Batch]:
        """A headspace run: the trainer's compute ceiling. Takes the next
        `cache` batches of the stream (copied into private memory, their
        slots given back), then yields them over and over for `steps`
        steps with no wait for data, timing the trainer's work on each:
        run the usual training step on what it yields. The result is in
        `loader.stall` (`headspace_steps`, `headspace_compute`, and `gain`:
        how many times faster the steps would be with a perfect loader)
        and goes to the node with the next report (its summary states the
        gain). The cached batches are the stream's own: the run trains on
        them `steps / cache` times over, as a warm-up would."""
        from ._stall import headspace

        return headspace(self, steps, cache)

    @property
    def stall(self) -> Stall:
        """The data-stall accounting so far (every connection): steps,
        seconds waiting for batches, seconds computing between them, and
        the share of time spent waiting."""
        return self._stall.total

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- messages -----------------------------------------------------------

    def _read(self):
        c = self._connect()
        if self._queue:
            return self._queue.popleft()
        c.flush_releases()
        # Releases waiting for device work hold slots: when nothing is
        # here to read, wait for the oldest of them rather than for the
        # node, which may be waiting for that very slot.
        while c.pending_release and c.gated() and not c.readable():
            c.flush_releases(wait=1)
        return c.read()

    def _make_batch(self, c, d):
        n = d["nbytes"]
        dims = tuple(d.get("shape") or d["dims"])
        dtype = _dtype(d.get("dtype"))
        if n:
            if n != math.prod(dims) * dtype.itemsize:  # Python ints: no overflow, and ~20 us less a batch than np.prod
                raise FeedError("protocol", f"batch of {n} bytes does not hold {d.get('dtype')} {list(dims)}")
            mm = c.regions[d["region"]]
            # The flat array is the base of every view NumPy or torch makes
            # of the batch (NumPy collapses view chains down to it, and no
            # further: its own base is a memoryview of the mmap). When it is
            # collected, no view is left and the slot goes back. No pixel
            # memory is allocated here.
            flat = np.frombuffer(memoryview(mm)[d["offset"]:d["offset"] + n], dtype=dtype)
            images = flat.reshape(dims)
            owner = flat
        else:
            flat = None
            images = np.zeros(dims, dtype=dtype)
            owner = images
        data = None
        if (c.welcome.get("spec") or {}).get("kind") == "raw":
            data = _raw_rows(flat, dims, d.get("lengths") or [])
        bid = d["id"]
        conn_ref = weakref.ref(c)
        cuda = c.cuda
        gate = [None]  # set by Batch.cuda(): the copy reading the slot
        dev, index = None, None
        if d.get("device_region"):
            ptr, size, index = c.dev_regions[d["device_region"]]
            off = d.get("device_offset", 0)
            if off < 0 or off + n > size:
                raise FeedError("protocol", f"device batch [{off}, {off + n}) outside its region of {size} bytes")
            dev = _cuda_array(ptr + off, dims, owner, index, dtype)
        elif cuda is not None:
            if c.dev_index is None:  # once per connection: the welcome's device in this process
                c.dev_index = cuda.device_index(c.welcome["device"]) if c.welcome.get("device") else 0
            index = c.dev_index

        def queue_release():
            conn = conn_ref()
            if conn is not None and not conn.closed:
                if dev is not None:
                    # kernels enqueued on the current stream may still read
                    # the device slot: release after them
                    gate[0] = cuda.record_event(index)
                conn.queue_release(bid, gate)

        fin = weakref.finalize(owner, queue_release)
        fin.atexit = False
        fields = present = None
        schema = c.welcome.get("fields")
        if schema:
            f, self._fields = self._fields, None
            if f is None or f[0] != bid:
                raise FeedError("protocol", f"batch {bid} came without its fields")
            _, fields, present = f
        if data is not None:  # "data" names the raw bytes, unless the dataset has a field of that name
            fields, present = dict(fields or {}), dict(present or {})
            if "data" not in fields:
                fields["data"], present["data"] = data, [True] * len(data)
        return Batch(d, images, fin, device_array=dev, gate=gate, cuda=cuda, index=index, fields=fields,
                     present=present, data=data)

    def next_batch(self) -> Optional[Batch]:
        """The next batch, or None at the end of an epoch (then the next
        call continues with the next epoch) or of the job."""
        if self._ended:
            return None
        if self.release_previous and self._prev is not None:
            self._prev.release()
            self._prev = None
        c = self._connect()  # the wait for a node to start is not a step's
        asked = self._stall.ask()
        if self._stall.due():
            c.stalls.append(self._stall.take())
        while True:
            t, m = self._read()
            if t == FIELDS:
                self._fields = _parse_fields(m, self._conn.welcome.get("fields") or [])
                continue
            if t == BATCH:
                b = self._make_batch(self._conn, m)
                self._stall.handed(asked)
                self._last = (b.epoch, b.step)
                self._era = m.get("era", self._era)
                if self.release_previous:
                    self._prev = b
                return b
            if t == EPOCH_END:
                self._epoch_ended = m["epoch"]
                if m.get("last"):  # the stream's last epoch: the end comes next
                    self._say_ended()
                return None
            if t == END:
                self._ended = True
                self._say_ended()
                return None
            if t == ROLLBACK:
                tok = base64.b64decode(m["token"]) if m.get("token") else None
                self.rollbacks += 1
                self._last = None
                if m.get("committed"):
                    self._committed = (m["epoch"], m["step"], tok)
                    self._token = tok
                raise RolledBack(m.get("epoch"), m.get("step"), tok, bool(m.get("committed")))
            if t == ERROR:
                if m.get("fatal", True):
                    self.close()
                    raise FeedError(m.get("code"), m.get("message"), True, m.get("report"))
                continue  # a late answer to a commit
            raise FeedError("protocol", f"unexpected message type {t}")

    def _say_ended(self):
        """Tell the node this trainer read its stream to the end (version
        4): a standalone node's rank is over only once it hears it (a
        trainer that stopped short comes back from its checkpoint)."""
        c = self._conn
        if c is None or c.closed or c.said_ended or c.welcome.get("version", 1) < 4:
            return
        c.said_ended = True
        try:
            c.send(ENDED, {})
        except OSError:
            pass  # a node already gone needs no answer

    def __iter__(self) -> Iterator[Batch]:
        while True:
            b = self.next_batch()
            if b is None:
                return
            yield b

    def batches(self) -> Iterator[Batch]:
        """Every remaining batch of the job, across epochs."""
        while not self._ended:
            yield from self

    @property
    def ended(self) -> bool:
        return self._ended

    # -- commits and state --------------------------------------------------

    def commit(self, step: Optional[int] = None, epoch: Optional[int] = None) -> Optional[bytes]:
        """Say the model is saved through batch (epoch, step) (default: the
        last batch handed out) and return the node's resume token."""
        if step is None:
            if self._last is None:
                # nothing handed out since the last commit, rollback or
                # connection: the welcome may name the rank's last commit
                self._connect()
                return self._committed[2] if self._committed else self._token
            epoch, step = self._last
        elif epoch is None:
            epoch = self._last[0] if self._last else 0
        c = self._connect()
        c.flush_releases()
        self._req += 1
        req = self._req
        msg = {"req": req, "epoch": int(epoch), "step": int(step)}
        if self._era:
            msg["era"] = self._era
        c.send(COMMIT, msg)
        held = []
        try:
            while True:
                t, m = c.read()
                if t == COMMITTED and m.get("req") == req:
                    tok = base64.b64decode(m["token"])
                    self._committed = (m["epoch"], m["step"], tok)
                    self._token = tok
                    return tok
                if t == ERROR and (m.get("req") == req or m.get("fatal", True)):
                    if m.get("fatal", True):
                        self.close()
                    if m.get("code") == "rolled_back":
                        raise RolledBack(message=m.get("message"))
                    raise FeedError(m.get("code"), m.get("message"), m.get("fatal", True), m.get("report"))
                held.append((t, m))
        finally:
            self._queue.extend(held)

    def state_dict(self) -> Dict[str, Any]:
        """Commit the last batch handed out and return the position to save
        with the model checkpoint: {"version", "token", "epoch", "step"}.

        Cluster mode under data parallelism (torch.distributed initialized,
        world size > 1): a collective -- every rank must call it at the same
        step, as DDP checkpointing does. Each rank commits, the ranks
        all-gather their tokens, and "token" is `cut_token()` of them: the
        token with the largest journal generation, the one that restores
        every rank at exactly this step (a token restores the generation
        that made *its* commit durable; other ranks' commits of the same
        step may have landed in a later one). Give it to
        `longshore-coordinator --resume` to restart the job at this
        checkpoint. "rank_token" is this rank's own token: what
        `load_state_dict()` presents to a running node (which accepts only
        the rank's last acknowledged commit). When any rank's commit is
        answered `rolled_back`, every rank raises `RolledBack` (fields
        None) after the all-gather: the checkpoint is incomplete, save
        nothing. If some ranks' commits were acknowledged, their rollbacks
        will name this step while the others' name an earlier one: the job
        cannot go on in place; restart it with `--resume` and the previous
        checkpoint's "token"."""
        dist = _distributed()
        try:
            tok = self.commit()
        except RolledBack:
            if dist is None or self._conn is None or self._conn.welcome.get("mode") != "cluster":
                raise
            # the other ranks are (or will be) in the all-gather below: join
            # it, so that every rank raises instead of the collectives of
            # the ranks going out of step (a hang: the ranks whose commits
            # were acknowledged wait in the all-gather, this one in its
            # next step's gradient all-reduce)
            tok = None
        sd = {"version": PROTOCOL_VERSION, "token": tok}
        if self._committed:
            sd["epoch"], sd["step"] = self._committed[0], self._committed[1]
        if dist is not None and self._conn is not None and self._conn.welcome.get("mode") == "cluster":
            toks = [None] * dist.get_world_size()
            dist.all_gather_object(toks, tok)
            failed = [r for r, t in enumerate(toks) if t is None]
            if failed:
                raise RolledBack(message=f"rolled back: the commit of rank(s) {failed} belongs to a delivery era "
                                         "that ended, so this data-parallel checkpoint is not complete on every "
                                         "rank; the next read raises this rank's rollback")
            sd["rank_token"] = tok
            sd["token"] = cut_token(toks)
        return sd

    def load_state_dict(self, sd: Dict[str, Any]) -> None:
        """Resume from a state_dict(): the node re-delivers from the batch
        after its commit (reconnecting if already connected). A state of a
        data-parallel cluster job presents its "rank_token" (this rank's own
        commit), not the job-wide cut in "token"."""
        self._token = sd.get("rank_token") or sd.get("token")
        self._queue.clear()
        self.close()
        self._last = None
        self._ended = False
