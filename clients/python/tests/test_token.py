"""Cluster resume tokens: parsing and the data-parallel cut."""

import base64
import json
import pathlib

import pytest

import longshore
from longshore._token import crc32c

# The token table the Go tests check too (cluster/journal/token_test.go):
# (token, job, generation, epoch, step) as Go's journal.Token.String makes
# them, and tokens Go refuses.
_TABLE = pathlib.Path(__file__).resolve().parents[3] / "cluster" / "journal" / "testdata" / "tokens.json"
with open(_TABLE) as _f:
    _TOKENS = json.load(_f)
GO_TOKENS = [(c["token"], c["job"], c["gen"], c["epoch"], c["step"]) for c in _TOKENS["valid"] if "ident" not in c]
GO_TOKENS_V2 = [c for c in _TOKENS["valid"] if "ident" in c]
BAD_TOKENS = [c["token"] for c in _TOKENS["invalid"]]
JOB = 0x1122334455667788


def test_crc32c_check_value():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


@pytest.mark.parametrize("tok,job,gen,epoch,step", GO_TOKENS)
def test_parse_go_tokens(tok, job, gen, epoch, step):
    want = longshore.JournalToken(job, gen, epoch, step)
    assert longshore.parse_token(tok) == want
    assert longshore.parse_token(tok.encode()) == want  # as the feed hands it over
    assert longshore.parse_token(" " + tok + "\n") == want


@pytest.mark.parametrize("case", GO_TOKENS_V2, ids=lambda c: c["token"][:12])
def test_parse_go_tokens_v2(case):
    i = case["ident"]
    ident = longshore.TokenIdentity(i["digest"], i["seed"], i["block"], i["window"], i["batch_size"], i["epochs"])
    want = longshore.JournalToken(case["job"], case["gen"], case["epoch"], case["step"], ident)
    assert longshore.parse_token(case["token"]) == want


def test_v1_has_no_identity():
    assert longshore.parse_token(GO_TOKENS[0][0]).ident is None


@pytest.mark.parametrize("bad", BAD_TOKENS + [b"standalone-token-bytes"])
def test_parse_rejects(bad):
    with pytest.raises(ValueError):
        longshore.parse_token(bad)


def _encode(body):
    b = body + crc32c(body).to_bytes(4, "little")
    return "lsr1." + base64.urlsafe_b64encode(b).decode().rstrip("=")


def test_encoder_agrees_with_go():
    # _encode built the table's "good checksum" refusals; it must make Go's tokens.
    assert _encode(JOB.to_bytes(8, "little") + b"\x07\x00\x0a") == GO_TOKENS[1][0]


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
