package s3

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestOptionsHideSecrets(t *testing.T) {
	o := DefaultOptions()
	o.AccessKey, o.SecretKey, o.SessionToken = "AKIAEXAMPLE", "s3cr3t-value", "t0ken-value"
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("opening", "opts", o)
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("opening", "opts", o)
	out := fmt.Sprintf("%v %+v %#v %s", o, o, o, o) + fmt.Sprint(o) + fmt.Errorf("open: %v", o).Error() + buf.String()
	for _, secret := range []string{o.SecretKey, o.SessionToken} {
		if strings.Contains(out, secret) {
			t.Errorf("a secret is printed:\n%s", out)
		}
	}
	if !strings.Contains(out, "AKIAEXAMPLE") || !strings.Contains(out, redacted) {
		t.Errorf("want the access key and the redaction marks:\n%s", out)
	}
	if s := (Options{}).String(); strings.Contains(s, redacted) {
		t.Errorf("unset secrets show as redacted: %s", s)
	}
}
