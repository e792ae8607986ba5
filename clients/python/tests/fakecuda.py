"""A fake of the client's device seam (longshore._cuda.TorchCuda), the
client's counterpart of the node's gpu.Twin: device memory is host bytes,
events complete when the test says so, and it records what was called, so
the client's bookkeeping (pinning, IPC imports, releases gated on device
work) is tested without a GPU."""


class FakeEvent:
    def __init__(self, cuda):
        self.done = False
        self.cuda = cuda

    def query(self):
        return self.done

    def synchronize(self):
        self.cuda.log.append(("synchronize", id(self)))
        self.done = True


class FakeCuda:
    def __init__(self, devices=("GPU-7717a000-0000-4000-8000-000000000000",), base=0x7F0000000000):
        self.devices = list(devices)
        self.base = base
        self.log = []  # (call, args...)
        self.events = []
        self.imports = {}  # ptr -> handle
        self.registered = {}  # addr -> size

    def device_index(self, ref):
        return self.devices.index(ref["uuid"])

    def host_register(self, addr, size):
        self.log.append(("host_register", addr, size))
        self.registered[addr] = size
        return True

    def host_unregister(self, addr):
        self.log.append(("host_unregister", addr))
        del self.registered[addr]

    def ipc_open(self, handle, index):
        ptr = self.base + (len(self.log) << 24)
        self.log.append(("ipc_open", bytes(handle), index, ptr))
        self.imports[ptr] = bytes(handle)
        return ptr

    def ipc_close(self, ptr, index):
        self.log.append(("ipc_close", ptr, index))
        del self.imports[ptr]

    def record_event(self, index):
        ev = FakeEvent(self)
        self.events.append(ev)
        self.log.append(("record_event", index))
        return ev

    def as_tensor(self, arr, index):
        self.log.append(("as_tensor", index))
        return arr

    def to_device(self, batch, index, non_blocking):
        self.log.append(("to_device", index, non_blocking))
        return batch.images.copy(), self.record_event(index)
