"""The client's side of cluster-mode rollbacks, against a scripted node
(fakenode.py) speaking protocol v2."""

import base64

import pytest

import longshore
from fakenode import (BATCH, COMMIT, COMMITTED, EPOCH_END, ERROR, HELLO, ROLLBACK, WELCOME, FakeNode,
                      batch, welcome)
from limits import HANG_S

T3 = b"lsr1.iHdmVUQzIhEHAAr0yoIk"  # any well-formed token (see test_token.py)
T7 = b"lsr1.iHdmVUQzIhGsAgKCAsRuyxE"


def b64(tok):
    return base64.b64encode(tok).decode()


def test_rollback_names_last_ack_and_reading_continues():
    def answer_commit(node):
        c = node.last[COMMIT]
        node.send(COMMITTED, {"req": c["req"], "epoch": c["epoch"], "step": c["step"], "token": b64(T3)})

    node = FakeNode([
        ("expect", HELLO),
        ("send", WELCOME, welcome(era=1)),
        ("send", BATCH, batch(1, 0, 0, era=1)),
        ("send", BATCH, batch(2, 0, 1, era=1)),
        ("expect", COMMIT), answer_commit,
        ("send", BATCH, batch(3, 0, 2, era=1)),
        ("send", ROLLBACK, {"epoch": 0, "step": 1, "token": b64(T3), "committed": True, "era": 2}),
        ("send", BATCH, batch(4, 0, 2, era=2, end_of_stream=True)),
        ("send", EPOCH_END, {"epoch": 0}),
        ("expect", COMMIT), answer_commit,
    ])
    loader = longshore.Loader(node.path, timeout=HANG_S)
    assert loader.welcome["mode"] == "cluster"
    assert [(b.epoch, b.step, b.era) for b in (loader.next_batch(), loader.next_batch())] == [(0, 0, 1), (0, 1, 1)]
    assert loader.commit() == T3
    b = loader.next_batch()
    assert (b.step, b.era, b.end_of_stream) == (2, 1, False)
    with pytest.raises(longshore.RolledBack) as ei:
        loader.next_batch()
    rb = ei.value
    assert isinstance(rb, longshore.FeedError) and not rb.fatal and rb.code == "rolled_back"
    assert (rb.epoch, rb.step, rb.token, rb.committed) == (0, 1, T3, True)
    assert loader.rollbacks == 1
    assert loader.commit() == T3  # nothing handed out since: the rollback's commit, without asking the node
    b = loader.next_batch()
    assert (b.epoch, b.step, b.era, b.end_of_stream) == (0, 2, 2, True)
    assert loader.next_batch() is None  # epoch end
    sd = loader.state_dict()
    assert sd["token"] == T3 and (sd["epoch"], sd["step"]) == (0, 2)
    loader.close()
    node.join()
    commits = [p for t, p in node.received if t == COMMIT]
    # each commit names the era of its batch
    assert [(c["epoch"], c["step"], c.get("era")) for c in commits] == [(0, 1, 1), (0, 2, 2)]


def test_commit_of_ended_era_then_rollback():
    node = FakeNode([
        ("expect", HELLO),
        ("send", WELCOME, welcome(era=3, committed={"epoch": 1, "step": 4, "token": b64(T7), "committed": True},
                                  resume=(1, 5))),
        ("send", BATCH, batch(1, 1, 5, era=3)),
        ("expect", COMMIT),
        # the rank's session ended under the commit: the rollback first, then the commit's answer
        ("send", ROLLBACK, {"epoch": 1, "step": 4, "token": b64(T7), "committed": True, "era": 4}),
        lambda n: n.send(ERROR, {"code": "rolled_back", "message": "era ended", "fatal": False,
                                 "req": n.last[COMMIT]["req"]}),
        ("send", BATCH, batch(2, 1, 5, era=4)),
    ])
    loader = longshore.Loader(node.path, timeout=HANG_S)
    # the welcome's last acknowledged commit is the loader's state before any commit
    assert loader.state_dict()["token"] == T7
    b = loader.next_batch()
    assert (b.epoch, b.step, b.era) == (1, 5, 3)
    with pytest.raises(longshore.RolledBack) as ei:
        loader.commit()
    assert ei.value.epoch is None  # the commit's answer: the details come with the rollback
    with pytest.raises(longshore.RolledBack) as ei:
        loader.next_batch()  # the rollback read while the commit waited
    assert (ei.value.epoch, ei.value.step, ei.value.token, ei.value.committed) == (1, 4, T7, True)
    b = loader.next_batch()
    assert (b.epoch, b.step, b.era) == (1, 5, 4)
    loader.close()
    node.join()


def test_rollback_before_any_commit():
    node = FakeNode([
        ("expect", HELLO),
        ("send", WELCOME, welcome(era=1)),
        ("send", BATCH, batch(1, 0, 0, era=1)),
        ("send", ROLLBACK, {"epoch": 0, "step": 0, "committed": False, "era": 2}),
        ("send", BATCH, batch(2, 0, 0, era=2)),
    ])
    loader = longshore.Loader(node.path, timeout=HANG_S)
    loader.next_batch()
    with pytest.raises(longshore.RolledBack) as ei:
        loader.next_batch()
    assert ei.value.committed is False and ei.value.token is None
    assert "initial model" in str(ei.value)
    assert loader.next_batch().era == 2
    loader.close()
    node.join()


class FakeDist:
    """torch.distributed as state_dict() uses it, with other ranks' tokens."""

    def __init__(self, others):
        self.others = others

    def get_world_size(self):
        return 1 + len(self.others)

    def all_gather_object(self, out, obj):
        out[:] = [obj] + self.others


def test_state_dict_data_parallel_cut(monkeypatch):
    from longshore import _feed

    def answer_commit(node):
        c = node.last[COMMIT]
        node.send(COMMITTED, {"req": c["req"], "epoch": c["epoch"], "step": c["step"], "token": b64(T3)})

    node = FakeNode([("expect", HELLO), ("send", WELCOME, welcome(era=1)), ("send", BATCH, batch(1, 0, 5, era=1)),
                     ("expect", COMMIT), answer_commit, ("accept",), ("expect", HELLO),
                     ("send", WELCOME, welcome(era=1))])
    loader = longshore.Loader(node.path, timeout=HANG_S)
    loader.next_batch()
    # the other rank's commit of step 5 landed in a later generation (300 > 7)
    monkeypatch.setattr(_feed, "_distributed", lambda: FakeDist([T7]))
    sd = loader.state_dict()
    assert sd["token"] == T7 and sd["rank_token"] == T3 and (sd["epoch"], sd["step"]) == (0, 5)
    # a restarted trainer presents its own commit to the running node
    loader.load_state_dict(sd)
    loader.welcome
    loader.close()
    node.join()
    hellos = [p for t, p in node.received if t == HELLO]
    assert base64.b64decode(hellos[1]["token"]) == T3
