"""longshore: trainer-side client of the longshore feed.

    import longshore
    loader = longshore.Loader()          # rank from LOCAL_RANK/SLURM_LOCALID, dir from LONGSHORE_FEED_DIR
    steps = len(loader)                  # batches per epoch for this rank (standalone nodes)
    for batch in loader:                 # one epoch per `for`, like a DataLoader
        x = batch.images                 # NumPy uint8 view over shared memory: no copy
        y = batch.labels
        ...
        loader.commit()                  # after saving a checkpoint; returns the resume token
    sd = loader.state_dict()             # save with the model; load_state_dict(sd) resumes there

Cluster mode (a node started with --join ... --sink feed): commit() blocks
until the coordinator acknowledges and returns a journal token ("lsr2.…");
when the coordinator restarts or the node is evicted, iteration raises
RolledBack naming the rank's last acknowledged commit (epoch, step, token):
restore the model saved with it and keep iterating. Under data
parallelism state_dict() all-gathers the ranks' tokens and keeps
cut_token() of them, the one that restores every rank at that step.

See docs/feed-protocol.md in the longshore repository for the wire protocol.
"""

from ._feed import (  # noqa: F401
    PROTOCOL_VERSION,
    Batch,
    ConnectTimeout,
    NodeRefused,
    FeedError,
    Loader,
    RolledBack,
    TorchBatch,
    env_rank,
    socket_path,
)
from ._token import JournalToken, TokenIdentity, cut_token, parse_token  # noqa: F401

__all__ = ["Loader", "Batch", "TorchBatch", "FeedError", "ConnectTimeout", "NodeRefused", "RolledBack", "socket_path", "env_rank",
           "PROTOCOL_VERSION",
           "cut_token", "parse_token", "JournalToken", "TokenIdentity"]
