"""Cluster resume tokens ("lsr2." and "lsr1." tokens of the coordinator's journal).

A token is "lsr2." (or "lsr1.") + base64url (no padding) of

    8 bytes   job id, little-endian
    uvarint   journal generation (>= 1) that made the commit durable
    uvarint   epoch
    varint    step (zigzag, as Go's binary.AppendVarint)
    -- version 2 only: the job's identity --
    uvarint   length of the dataset's manifest digest, then its bytes
    8 bytes   seed, little-endian
    uvarint   block, window, batch size, epochs (four uvarints)
    --
    4 bytes   CRC-32C (Castagnoli) of the bytes above, little-endian

(cluster/journal/token.go). Only the generation decides what the
coordinator restores; epoch and step are for messages and checks; the
identity lets a node refuse a token of another job (another dataset,
seed, block, window, batch size or epoch count) when a trainer presents
it. Version 1 tokens (no identity) are still read: ident is None.
"""

import base64
import collections

TOKEN_PREFIX = "lsr1."
TOKEN2_PREFIX = "lsr2."

TokenIdentity = collections.namedtuple("TokenIdentity", "digest seed block window batch_size epochs")
TokenIdentity.__doc__ = "The job identity a version 2 token carries: dataset digest, seed, block, window, batch size, epochs."

JournalToken = collections.namedtuple("JournalToken", "job gen epoch step ident", defaults=(None,))
JournalToken.__doc__ = (
    "A parsed cluster resume token: job id, journal generation, epoch, step, and the job's "
    "TokenIdentity (None in a version 1 token)."
)


def _crc32c_table():
    poly = 0x82F63B78  # Castagnoli, reflected
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli) of data, as Go's crc32.Checksum(data, castagnoli)."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _uvarint(b, i, what, token):
    x, shift = 0, 0
    while True:
        if i >= len(b) or shift > 63:
            raise ValueError(f"longshore: bad resume token {token!r}: malformed {what}")
        c = b[i]
        i += 1
        x |= (c & 0x7F) << shift
        if c < 0x80:
            if x >> 64:
                raise ValueError(f"longshore: bad resume token {token!r}: {what} overflows")
            return x, i
        shift += 7


def parse_token(token):
    """Decode a cluster resume token (str or bytes, "lsr1.…") into a
    JournalToken. Raises ValueError for anything else, a damaged token
    (checksum mismatch) or a malformed one, as the coordinator would."""
    s = token.decode("ascii", "replace") if isinstance(token, (bytes, bytearray, memoryview)) else str(token)
    s = s.strip()

    def bad(why):
        return ValueError(f"longshore: bad resume token {s!r}: {why}")

    if s.startswith(TOKEN2_PREFIX):
        version = 2
    elif s.startswith(TOKEN_PREFIX):
        version = 1
    else:
        raise bad("not a longshore cluster resume token (want lsr2.… or lsr1.…)")
    rest = s[len(TOKEN_PREFIX):]
    if "=" in rest or len(rest) % 4 == 1:
        raise bad("damaged (not unpadded base64url)")
    try:
        b = base64.urlsafe_b64decode(rest + "=" * (-len(rest) % 4))
    except (ValueError, TypeError):
        raise bad("damaged (not base64url)") from None
    if len(b) < 8 + 3 + 4:
        raise bad("damaged (too short)")
    body, (sum_,) = b[:-4], (int.from_bytes(b[-4:], "little"),)
    if crc32c(body) != sum_:
        raise bad("damaged (checksum mismatch)")
    job = int.from_bytes(body[:8], "little")
    gen, i = _uvarint(body, 8, "generation", s)
    epoch, i = _uvarint(body, i, "epoch", s)
    zz, i = _uvarint(body, i, "step", s)
    step = (zz >> 1) ^ -(zz & 1)
    ident = None
    if version == 2:
        n, i = _uvarint(body, i, "digest length", s)
        if n == 0 or n > 1024 or i + n + 8 > len(body):
            raise bad("malformed digest")
        digest = body[i : i + n].decode("ascii", "replace")
        i += n
        seed = int.from_bytes(body[i : i + 8], "little")
        i += 8
        rest_ = []
        for what in ("block", "window", "batch size", "epochs"):
            v, i = _uvarint(body, i, what, s)
            if v > 1 << 24:
                raise bad(f"{what} out of range")
            rest_.append(v)
        ident = TokenIdentity(digest, seed, *rest_)
    if i != len(body) or epoch > 1 << 30 or gen == 0:
        raise bad("malformed")
    return JournalToken(job, gen, epoch, step, ident)


def cut_token(tokens):
    """The exact cut of a data-parallel checkpoint: of the ranks' tokens
    for the same step (each rank's commit of it), the one with the largest
    journal generation.

    A token restores the journal generation that made *that* commit
    durable; other ranks' commits of the same step may land in a later
    generation. Under DDP no rank commits step t+1 before every rank
    finished step t, so the largest generation among the ranks' tokens of
    step t holds every rank at exactly t: that token, given to
    `longshore-coordinator --resume`, restarts the whole job at the
    checkpoint. Returns it as given (bytes or str). Raises ValueError for
    an empty list, a token that does not parse or whose checksum fails,
    and tokens of different jobs."""
    best, best_tok, job = None, None, None
    for tok in tokens:
        t = parse_token(tok)
        if job is None:
            job = t.job
        elif t.job != job:
            raise ValueError(f"longshore: cut_token: tokens of different jobs ({job:#x} and {t.job:#x})")
        if best is None or t.gen > best.gen:
            best, best_tok = t, tok
    if best is None:
        raise ValueError("longshore: cut_token: no tokens")
    return best_tok
