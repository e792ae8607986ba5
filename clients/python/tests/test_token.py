"""Cluster resume tokens: parsing and the data-parallel cut."""

import base64

import pytest

import longshore
from longshore._token import crc32c

# Made by Go (cluster/journal.Token.String), with a throwaway program in
# the repository root:
#
#   for _, t := range []journal.Token{{Job: 0x1122334455667788, Gen: 1}, ...} {
#       fmt.Printf("(%q, %#x, %d, %d, %d),\n", t.String(), t.Job, t.Gen, t.Epoch, t.Step)
#   }
#
# (go run, then pasted): (token, job, generation, epoch, step).
GO_TOKENS = [
    ("lsr1.iHdmVUQzIhEBAADbFNGe", 0x1122334455667788, 1, 0, 0),
    ("lsr1.iHdmVUQzIhEHAAr0yoIk", 0x1122334455667788, 7, 0, 5),
    ("lsr1.iHdmVUQzIhGsAgKCAsRuyxE", 0x1122334455667788, 300, 2, 129),
    ("lsr1.iHdmVUQzIhGrAgKCAoBgvbk", 0x1122334455667788, 299, 2, 129),
    ("lsr1.EDJUdpi63P6AgICAgCCAgEAFanhxng", 0xfedcba9876543210, 1099511627776, 1048576, -3),
    ("lsr1.KgAAAAAAAADoBwGAgICAQF7iX5g", 0x2a, 1000, 1, 8589934592),
]
JOB = 0x1122334455667788


def test_crc32c_check_value():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


@pytest.mark.parametrize("tok,job,gen,epoch,step", GO_TOKENS)
def test_parse_go_tokens(tok, job, gen, epoch, step):
    want = longshore.JournalToken(job, gen, epoch, step)
    assert longshore.parse_token(tok) == want
    assert longshore.parse_token(tok.encode()) == want  # as the feed hands it over
    assert longshore.parse_token(" " + tok + "\n") == want


@pytest.mark.parametrize("bad", [
    "",
    "lsr2.iHdmVUQzIhEBAADbFNGe",          # another version
    "iHdmVUQzIhEBAADbFNGe",               # no prefix
    "lsr1.iHdmVUQzIhEBAADbFNGf",          # last character changed: checksum
    "lsr1.iHdmVUQzIhEBAADbFNGe==",        # padded
    "lsr1.iHdmVUQz",                      # too short
    "lsr1.iHdm+UQzIhEBAADbFNGe",          # not the URL alphabet
    b"standalone-token-bytes",
])
def test_parse_rejects(bad):
    with pytest.raises(ValueError):
        longshore.parse_token(bad)


def _encode(body):
    b = body + crc32c(body).to_bytes(4, "little")
    return "lsr1." + base64.urlsafe_b64encode(b).decode().rstrip("=")


def test_parse_rejects_malformed_with_good_checksum():
    job = JOB.to_bytes(8, "little")
    assert longshore.parse_token(_encode(job + b"\x07\x00\x0a")) == (JOB, 7, 0, 5)  # the encoder agrees with Go
    for body in [job + b"\x00\x00\x00",        # generation 0
                 job + b"\x07\x00\x0a\x00",    # trailing byte
                 job + b"\x07\x00\x80",        # truncated varint
                 job + b"\x07\x80\x80\x80\x80\x08\x00"]:  # epoch > 2^30
        with pytest.raises(ValueError):
            longshore.parse_token(_encode(body))


def test_cut_token_largest_generation():
    toks = [GO_TOKENS[3][0], GO_TOKENS[2][0], GO_TOKENS[1][0]]  # gens 299, 300, 7
    assert longshore.cut_token(toks) == GO_TOKENS[2][0]
    assert longshore.cut_token(reversed(toks)) == GO_TOKENS[2][0]
    # returned as given: bytes stay bytes
    assert longshore.cut_token([t.encode() for t in toks]) == GO_TOKENS[2][0].encode()
    assert longshore.cut_token([GO_TOKENS[0][0]]) == GO_TOKENS[0][0]


def test_cut_token_rejects():
    with pytest.raises(ValueError, match="different jobs"):
        longshore.cut_token([GO_TOKENS[0][0], GO_TOKENS[4][0]])
    with pytest.raises(ValueError, match="no tokens"):
        longshore.cut_token([])
    with pytest.raises(ValueError, match="checksum"):
        longshore.cut_token([GO_TOKENS[0][0], "lsr1.iHdmVUQzIhEBAADbFNGf"])
    with pytest.raises(ValueError):
        longshore.cut_token([GO_TOKENS[0][0], None])
