package actors

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps actors free of cgo-heavy and network dependencies: the
// FFmpeg decoder plugs in through actors/ffdecode, the cluster through
// Source, a CUDA uploader through gpu's interfaces.
func TestImports(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{
			"github.com/asticode/go-astiav", "github.com/longshore/longshore/decode",
			"github.com/longshore/longshore/cluster", "gorgonia.org/cu",
			"github.com/hashicorp/memberlist",
			// minio-go comes in through storage, which keeps its S3 store
			// in the same package as the Store interface.
		} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("actors imports %s", dep)
			}
		}
	}
}
