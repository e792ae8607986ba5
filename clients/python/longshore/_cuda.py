"""The client's device seam: what the Loader needs of CUDA, in one small
object, so that the bookkeeping (which regions are pinned or imported,
which releases wait for which device work) is tested without a GPU
against a fake (tests/fakecuda.py), the way the node tests its side
against gpu.Twin.

`TorchCuda` is the real one: PyTorch for devices, streams, events and
page-locking (torch.cuda.cudart().cudaHostRegister), and the driver API
through ctypes for CUDA IPC (libcuda.so.1, which every machine with an
NVIDIA driver has: PyTorch does not expose cuIpcOpenMemHandle). A CUDA
call needs a context current on the calling thread; every method first
selects the device with torch.cuda.device, which makes the device's
primary context current -- the context the node's export and PyTorch's
allocations share.
"""

import ctypes

CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1


class CudaError(RuntimeError):
    pass


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


class CudaArray:
    """A device buffer as a `__cuda_array_interface__` (version 3)
    object: `torch.as_tensor(a, device="cuda")`, CuPy and Numba take it
    without a copy. `owner` is kept alive with it: the host array whose
    finalizer gives the batch back, so the slot is not released while a
    tensor over the device buffer lives. `stream` is None: the node sends
    a device batch only after its copy completed, so readers need not
    wait on any stream."""

    __slots__ = ("__cuda_array_interface__", "owner", "device")

    def __init__(self, ptr, shape, owner, device, typestr="|u1"):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr, "data": (int(ptr), False),
            "strides": None, "version": 3, "stream": None,
        }
        self.owner = owner
        self.device = device


class TorchCuda:
    """The real device seam, on PyTorch and libcuda."""

    def __init__(self):
        import torch

        if not torch.cuda.is_available():
            raise CudaError("longshore: device delivery needs CUDA: torch.cuda.is_available() is False")
        self.torch = torch
        self._lib = None

    def _libcuda(self):
        if self._lib is None:
            self._lib = ctypes.CDLL("libcuda.so.1")
            open_ = getattr(self._lib, "cuIpcOpenMemHandle_v2", None) or self._lib.cuIpcOpenMemHandle
            open_.argtypes = [ctypes.POINTER(ctypes.c_uint64), _IpcHandle, ctypes.c_uint]
            open_.restype = ctypes.c_int
            self._open = open_
            self._lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
            self._lib.cuIpcCloseMemHandle.restype = ctypes.c_int
        return self._lib

    def device_index(self, ref):
        """This process's index of the node's device (by UUID, so the two
        processes may see different CUDA_VISIBLE_DEVICES orders)."""
        torch = self.torch
        want = (ref or {}).get("uuid", "")
        for i in range(torch.cuda.device_count()):
            u = getattr(torch.cuda.get_device_properties(i), "uuid", None)
            if u is not None and want.endswith(str(u)):
                return i
        o = (ref or {}).get("ordinal", 0)
        if 0 <= o < torch.cuda.device_count():
            return o
        raise CudaError(f"longshore: the node's device {ref} is not visible to this process")

    def host_register(self, addr, size):
        """Page-lock a mapped region in this process (cudaHostRegister), so
        that .cuda(non_blocking=True) from it is an asynchronous DMA.
        Returns False (and the copy stays pageable) if the driver refuses."""
        return int(self.torch.cuda.cudart().cudaHostRegister(addr, size, 0)) == 0

    def host_unregister(self, addr):
        self.torch.cuda.cudart().cudaHostUnregister(addr)

    def ipc_open(self, handle, index):
        self._libcuda()
        with self.torch.cuda.device(index):
            self.torch.cuda.current_stream(index).query()  # a runtime call: the primary context is current
            h = _IpcHandle()
            ctypes.memmove(h.reserved, bytes(handle), 64)
            ptr = ctypes.c_uint64()
            r = self._open(ctypes.byref(ptr), h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        if r != 0:
            raise CudaError(f"longshore: cuIpcOpenMemHandle failed (CUresult {r}): is the trainer on the node's device?")
        return ptr.value

    def ipc_close(self, ptr, index):
        with self.torch.cuda.device(index):
            self._libcuda().cuIpcCloseMemHandle(ptr)

    def record_event(self, index):
        """An event recorded now on the device's current stream: complete
        once the work enqueued on it so far (the trainer's reads of a batch)
        has run."""
        with self.torch.cuda.device(index):
            ev = self.torch.cuda.Event()
            ev.record()
        return ev

    def as_tensor(self, arr, index):
        return self.torch.as_tensor(arr, device=f"cuda:{index}")

    def to_device(self, batch, index, non_blocking):
        t = batch.tensor().to(f"cuda:{index}", non_blocking=non_blocking)
        return t, self.record_event(index)
