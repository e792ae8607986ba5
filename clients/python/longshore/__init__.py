"""longshore: trainer-side client of the longshore feed.

    import longshore
    loader = longshore.Loader()          # rank from LOCAL_RANK, dir from LONGSHORE_FEED_DIR
    for batch in loader:                 # one epoch per `for`, like a DataLoader
        x = batch.images                 # NumPy uint8 view over shared memory: no copy
        y = batch.labels
        ...
        loader.commit()                  # after saving a checkpoint; returns the resume token
    sd = loader.state_dict()             # save with the model; load_state_dict(sd) resumes there

See docs/feed-protocol.md in the longshore repository for the wire protocol.
"""

from ._feed import (  # noqa: F401
    PROTOCOL_VERSION,
    Batch,
    FeedError,
    Loader,
    RolledBack,
    socket_path,
)

__all__ = ["Loader", "Batch", "FeedError", "RolledBack", "socket_path", "PROTOCOL_VERSION"]
