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
// commit durable, and the commit's epoch and step (the last two for
// messages and checks; the generation alone decides what is restored).
type Token struct {
	Job   uint64
	Gen   uint64
	Epoch int
	Step  int64
}

const tokenPrefix = "lsr1."

// String encodes the token: "lsr1." and about 25 URL-safe characters.
func (t Token) String() string {
	b := binary.LittleEndian.AppendUint64(nil, t.Job)
	b = binary.AppendUvarint(b, t.Gen)
	b = binary.AppendUvarint(b, uint64(t.Epoch))
	b = binary.AppendVarint(b, t.Step)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// ParseToken decodes a token String returned. Errors wrap ErrBadToken.
func ParseToken(s string) (Token, error) {
	bad := func(why string) (Token, error) {
		return Token{}, fmt.Errorf("%w %q: %s", ErrBadToken, s, why)
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), tokenPrefix)
	if !ok {
		return bad("not a longshore resume token (want lsr1.…)")
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
	if d.err != nil || len(d.b) != 0 || ep > 1<<30 || t.Gen == 0 {
		return bad("malformed")
	}
	t.Epoch = int(ep)
	return t, nil
}
