package journal

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
)

// Token is a resume token: what a trainer saves beside its model
// checkpoint. It names the job, the journal generation that made the
// commit durable, the commit's epoch and step (for messages and checks;
// the generation alone decides what is restored) and, from version 2,
// the job's Identity, so a node can refuse a token of another job the
// moment a trainer presents it.
type Token struct {
	Job   uint64
	Gen   uint64
	Epoch int
	Step  int64
	// Ident is the job's identity; unknown (Digest "") in a version 1
	// token, or one made by a journal that was not given one.
	Ident Identity
}

// Token prefixes: version 1 (no identity) is still read; version 2 is
// written whenever the identity is known.
const (
	tokenPrefix  = "lsr1."
	token2Prefix = "lsr2."
)

// String encodes the token: "lsr2." and about 70 URL-safe characters
// (job, generation, epoch, step, then the identity: digest, seed, block,
// window, batch size, epochs; a CRC-32C last), or "lsr1." and about 25
// without an identity.
func (t Token) String() string {
	b := binary.LittleEndian.AppendUint64(nil, t.Job)
	b = binary.AppendUvarint(b, t.Gen)
	b = binary.AppendUvarint(b, uint64(t.Epoch))
	b = binary.AppendVarint(b, t.Step)
	prefix := tokenPrefix
	if id := t.Ident; id.Known() {
		prefix = token2Prefix
		b = binary.AppendUvarint(b, uint64(len(id.Digest)))
		b = append(b, id.Digest...)
		b = binary.LittleEndian.AppendUint64(b, id.Seed)
		for _, v := range []int{id.Block, id.Window, id.BatchSize, id.Epochs} {
			b = binary.AppendUvarint(b, uint64(max(v, 0)))
		}
	}
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// ParseToken decodes a token String returned, of either version. Errors
// wrap ErrBadToken.
func ParseToken(s string) (Token, error) {
	bad := func(why string) (Token, error) {
		return Token{}, fmt.Errorf("%w %q: %s", ErrBadToken, s, why)
	}
	s2 := strings.TrimSpace(s)
	v := 1
	rest, ok := strings.CutPrefix(s2, tokenPrefix)
	if !ok {
		rest, ok = strings.CutPrefix(s2, token2Prefix)
		v = 2
	}
	if !ok {
		return bad("not a longshore resume token (want lsr1.… or lsr2.…)")
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(b) < 8+3+4 {
		return bad("damaged (not base64url, or too short)")
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return bad("damaged (checksum mismatch)")
	}
	t := Token{Job: binary.LittleEndian.Uint64(body)}
	d := &decoder{b: body[8:]}
	t.Gen = d.uvarint("generation")
	ep := d.uvarint("epoch")
	t.Step = d.varint("step")
	if v >= 2 {
		l := d.count("digest")
		if d.err == nil && (l == 0 || l > maxDigest) {
			d.fail("digest length")
		}
		if d.err == nil {
			t.Ident.Digest = string(d.b[:l])
			d.b = d.b[l:]
		}
		t.Ident.Seed = d.u64("seed")
		t.Ident.Block = d.small("block")
		t.Ident.Window = d.small("window")
		t.Ident.BatchSize = d.small("batch size")
		t.Ident.Epochs = d.small("epochs")
	}
	if d.err != nil || len(d.b) != 0 || ep > 1<<30 || t.Gen == 0 {
		return bad("malformed")
	}
	t.Epoch = int(ep)
	return t, nil
}

// CheckToken checks a token's identity against the job's: nil if they
// match or the token has none (version 1: only its job id can be
// checked, by the coordinator); else an error wrapping ErrBadToken and
// ErrMismatch naming each difference.
func CheckToken(t Token, job Identity) error {
	if !t.Ident.Known() {
		return nil
	}
	diffs := Diff(t.Ident, job)
	if len(diffs) == 0 {
		return nil
	}
	var parts []string
	for _, d := range diffs {
		parts = append(parts, fmt.Sprintf("%s %s in the token, %s in this job", d.Field, d.Was, d.Now))
	}
	return fmt.Errorf("%w: %w: the token is another job's: %s (a token resumes only the job that made it; restart that job's coordinator with --resume TOKEN, or start the trainer without it)",
		ErrBadToken, ErrMismatch, strings.Join(parts, "; "))
}
