"""The client's framing on its hot path, against a scripted node
(fakenode.py): releases (one a step, formatted without json, or several at
once), and frames that arrive in pieces or several to a read."""

import json
import struct

import longshore
from fakenode import BATCH, BYE, END, EPOCH_END, HELLO, RELEASE, WELCOME, FakeNode, batch, welcome
from limits import HANG_S


def frame(t, obj):
    body = json.dumps(obj).encode()
    return struct.pack("<I", len(body) + 1) + bytes([t]) + body


def released(node):
    # (a release of no batches carries the last stall report at close)
    return [p["ids"] for t, p in node.received if t == RELEASE and p["ids"]]


def test_releases_one_a_step_and_several_at_once():
    node = FakeNode([
        ("expect", HELLO),
        ("send", WELCOME, welcome()),
        ("send", BATCH, batch(7, 0, 0, era=1)),
        ("send", BATCH, batch(1234567890123, 0, 1, era=1)),
        ("expect", RELEASE),  # 7's alone
        ("send", BATCH, batch(9, 0, 2, era=1)),
        ("send", BATCH, batch(10, 0, 3, era=1)),
        ("expect", RELEASE),  # 1234567890123 and 9, in one message
        ("send", EPOCH_END, {"epoch": 0}),
        ("send", END, {}),
        ("expect", BYE),
    ])
    loader = longshore.Loader(node.path, timeout=HANG_S)
    b = loader.next_batch()
    b.release()
    b2 = loader.next_batch()  # sends 7's release first, alone
    b3 = loader.next_batch()
    assert (b2.id, b3.id) == (1234567890123, 9)
    b2.release()
    b3.release()
    b4 = loader.next_batch()  # both releases, in one message
    assert b4.id == 10
    del b4  # its last reference: the finalizer queues the release
    assert loader.next_batch() is None  # epoch end
    assert loader.next_batch() is None  # end
    loader.close()
    node.join()
    assert released(node) == [[7], [1234567890123, 9], [10]]
    for t, p in node.received:
        if t == RELEASE:  # 4 steps: the stall report (every 16) waits for the goodbye
            assert set(p) == ({"ids"} if p["ids"] else {"ids", "stall"})


def test_frames_in_pieces_and_together():
    def send_split(n):
        # two frames in one write, then one a byte at a time
        n.conn.sendall(frame(BATCH, batch(1, 0, 0, era=1)) + frame(BATCH, batch(2, 0, 1, era=1)))
        for c in frame(BATCH, batch(3, 0, 2, era=1, keys=["ä", "日本"])):
            n.conn.sendall(bytes([c]))

    node = FakeNode([("expect", HELLO), ("send", WELCOME, welcome()), send_split, ("expect", BYE)])
    loader = longshore.Loader(node.path, timeout=HANG_S, release_previous=True)
    got = [loader.next_batch() for _ in range(3)]
    assert [b.id for b in got] == [1, 2, 3]
    assert got[2].keys == ["ä", "日本"] and got[2].step == 2
    loader.close()
    node.join()
