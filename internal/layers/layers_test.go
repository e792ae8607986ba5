package layers

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/longshore/longshore"

// internal lists, for every package of the module, the packages of the
// module it may import directly. "*" allows any (the binaries, examples
// and tests from outside wire everything together). A package missing
// here fails the test: say where a new one sits before it lands.
var internal = map[string][]string{
	// The pure core and the pieces every layer shares.
	"cluster":             {},
	"gpu":                 {"gpu/internal/cuinit"}, // cuinit: the cuda build only
	"gpu/internal/cuinit": {"internal/buildversion"},
	"gpu/nvjpeg":          {"gpu", "internal/jpegcolour"},
	"storage":             {},
	// Datasets: formats, discovery, catalogs, the packed format; over the
	// store seam, knowing no actors and no cluster.
	"dataset":          {"storage", "internal/offheap"},
	"internal/clock":   {},
	"internal/offheap": {},
	"decode":           {"decode/spec", "internal/jpegcolour"},

	// Datasets written for tests (Parquet as Hugging Face publishes it):
	// nothing of the module.
	"dataset/datasettest": {},

	// The sample spec (kind, dtype, shape, layout), defined once for the
	// decoders and the pipeline: the standard library only.
	"decode/spec":     {},
	"internal/layers": {},
	// A test that every relative link of the docs resolves: nothing of the module.
	"internal/doclinks": {},
	// Ports for the processes tests start, below the kernel's ephemeral
	// range: nothing of the module.
	"internal/testports": {},
	// libjpeg's rule for a JPEG's colour space, which every decoder obeys.
	"internal/jpegcolour": {},

	// The release a binary reports with --version: answered before main
	// where a cuda build would initialize CUDA first (gpu/internal/cuinit).
	"internal/buildversion": {},

	// The node's pipeline and its seams.
	"actors":            {"dataset", "decode/spec", "gpu", "storage", "internal/clock"},
	"actors/actorstest": {},
	"actors/ffdecode":   {"actors", "decode", "decode/audio", "decode/spec", "decode/video", "storage"},
	"actors/nvdecode":   {"actors", "actors/ffdecode", "decode", "gpu", "gpu/nvjpeg"},
	// The node's --quarantine file: which failures are a sample's own.
	"actors/quarantine": {"actors", "dataset", "storage"},
	"decode/video":      {},
	"decode/audio":      {},
	// Trainer delivery: the client and protocol import nothing of the
	// node; the server sits on the pipeline and decides through the
	// pure core (cluster.RankDelivery, standalone too).
	"feed":     {},
	"delivery": {"dataset", "actors", "feed", "gpu", "storage", "cluster"},

	// Object stores behind the seam.
	"storage/s3":        {"storage", "internal/clock"},
	"storage/stores":    {"storage", "storage/s3"},
	"storage/faulty":    {"storage", "internal/clock"},
	"storage/storetest": {"storage"},
	"storage/miniotest": {"storage", "storage/s3", "internal/testports"},
	// A misbehaving HTTP proxy for tests: nothing of the module.
	"storage/faultproxy": {},

	// The cluster's shells around the core.
	"cluster/wire":    {"cluster"},
	"cluster/gossip":  {"internal/clock"},
	"cluster/journal": {"cluster", "storage", "internal/clock"},
	"cluster/coord":   {"cluster", "cluster/gossip", "cluster/journal", "cluster/wire", "storage", "internal/clock"},
	// Internet scale in one process: the core, the journal, a memory store.
	"cluster/scalesim": {"cluster", "cluster/journal", "storage"},
	"cluster/node": {"dataset", "actors", "feed", "delivery", "actors/quarantine", "cluster", "cluster/gossip", "cluster/journal", "cluster/wire",
		"gpu", "storage", "internal/clock"},

	// Observability: the table of series, the HTTP server and the
	// coordinator's status page know the cluster's shells, never the
	// pipeline (the coordinator links observe); observe/pipeline reads
	// the node's pipeline, its stores and its trainers into the table.
	"observe": {"cluster", "cluster/coord", "cluster/gossip", "cluster/journal", "cluster/wire", "internal/clock"},
	// Reading a registry in observe's tests: nothing of the module.
	"observe/observetest": {},
	"observe/pipeline":    {"observe", "dataset", "actors", "delivery", "cluster/gossip", "cluster/wire", "internal/clock", "storage", "storage/s3"},

	// Keys and certificates (crypto/x509 only) for a secured cluster.
	"cluster/certs": {},

	// Wiring.
	"cmd/coordinator":                {"*"},
	"cmd/node":                       {"*"},
	"cmd/longshore-pack":             {"*"},
	"cmd/longshore-manifest":         {"*"},
	"cmd/longshore-bench":            {"*"},
	"cmd/longshore-gpucheck":         {"*"},
	"cmd/longshore-nvjpegcheck":      {"*"},
	"cmd/longshore-nvdeccheck":       {"cmd/internal/version", "decode/video"},
	"cmd/longshore-simscale":         {"cluster/scalesim", "cmd/internal/version"},
	"cmd/longshore-lineage":          {"cluster", "dataset", "cluster/journal", "cmd/internal/config", "cmd/internal/version", "decode", "decode/video", "storage", "storage/s3", "storage/stores"},
	"cmd/internal/config":            {"cmd/internal/flagenv", "cluster"},
	"cmd/internal/config/configtest": {}, // the binaries' --print-config checks: nothing of the module
	"cmd/internal/logs":              {},
	"cmd/internal/flagenv":           {},
	"cmd/internal/secure":            {"cluster/gossip", "cluster/wire", "observe"},
	"cmd/longshore-certs":            {"cluster/certs", "cmd/internal/version"},
	"cmd/internal/mixing":            {},
	"cmd/internal/listing":           {"dataset", "storage"},
	"cmd/internal/procmem":           {},
	"cmd/internal/version":           {"internal/buildversion"}, // --version: the build's version
	"examples/feed_server":           {"*"},
	"examples/go_train":              {"feed"},
	"examples/inprocess":             {"*"},
	"integration":                    {},
	"integration/tools/healthcheck":  {},
	"integration/tools/upload":       {},
}

// reach lists, for a dependency, the packages of the module whose builds
// may link it (directly or through others). Every other package must not.
var reach = map[string][]string{
	// Only the S3 store and what opens stores by URL link the S3 client:
	// the seam (storage), the pipeline, the journal and the coordinator
	// actor need none of it.
	"github.com/minio/minio-go/v7": {"observe/pipeline", "storage/s3", "storage/stores", "storage/miniotest",
		"cmd/coordinator", "cmd/node", "cmd/longshore-pack", "cmd/longshore-manifest", "cmd/longshore-bench", "examples/inprocess",
		"integration/tools/upload", "cmd/longshore-lineage"},
	// FFmpeg only where images are decoded.
	"github.com/asticode/go-astiav": {"decode", "actors/ffdecode", "actors/nvdecode", "cmd/longshore-nvjpegcheck", "cmd/node", "cmd/longshore-bench",
		"examples/feed_server", "examples/inprocess", "cmd/longshore-lineage"},
	// CUDA never by default; in the cuda build gpu imports it and the
	// rest link it only through gpu (cudaReach).
	"gorgonia.org/cu": {},
	// The actor system: the pipeline and the cluster's shells; never a
	// trainer's client, the pure core, the stores or the decoder.
	"github.com/asynkron/protoactor-go": {"observe", "observe/pipeline", "actors", "actors/ffdecode", "actors/nvdecode", "actors/quarantine", "cmd/longshore-nvjpegcheck", "delivery",
		"cluster/wire", "cluster/coord", "cluster/node", "cmd/coordinator", "cmd/node", "cmd/longshore-bench", "cmd/longshore-gpucheck", "cmd/internal/secure",
		"examples/feed_server", "examples/inprocess"},
	// The Parquet reader only where datasets are read: the dataset
	// package (its Parquet format), and what links it for the samples,
	// the packed store and discovery; never the trainer's client, the
	// pure core, the stores or the coordinator actor.
	"github.com/parquet-go/parquet-go": {"dataset", "actors", "actors/ffdecode", "actors/nvdecode", "actors/quarantine", "delivery",
		"observe/pipeline", "cluster/node", "cmd/coordinator", "cmd/node", "cmd/internal/listing", "cmd/longshore-bench", "cmd/longshore-gpucheck",
		"cmd/longshore-lineage", "cmd/longshore-manifest", "cmd/longshore-pack", "cmd/longshore-nvjpegcheck", "examples/feed_server", "examples/inprocess",
		"dataset/datasettest"},
	// Gossip only in its shell and the daemons.
	"github.com/hashicorp/memberlist": {"observe", "observe/pipeline", "cluster/gossip", "cluster/coord", "cluster/node", "cmd/internal/secure", "cmd/coordinator", "cmd/node"},
}

// pipeline is the node's data pipeline: its stages, decoders, trainer
// delivery and the GPU behind them.
var pipeline = []string{"actors", "delivery", "actors/ffdecode", "actors/nvdecode",
	"decode", "decode/audio", "decode/video", "gpu", "gpu/nvjpeg"}

// unlinked lists, for a package of the module, packages of the module its
// build must not link, directly or through others (reach says the same of
// other modules: FFmpeg, for one, is go-astiav's entry there).
var unlinked = map[string][]string{
	// The coordinator hands out positions; it decodes and delivers
	// nothing, so it links no pipeline (it once did, through its metrics).
	"cmd/coordinator": pipeline,
	// observe is what the coordinator links of observability: the node's
	// side (observe/pipeline) is the node's alone.
	"observe": pipeline,
}

// cudaModules are what gorgonia.org/cu links: in the cuda build, gpu
// may link them (it is otherwise standard-library only), and any package
// may link them through gpu, none around it.
var cudaModules = []string{"gorgonia.org/cu", "github.com/pkg/errors", "github.com/google/uuid"}

// direct lists, for a standard-library package that touches the world
// (or CUDA), the packages of the module that may import it themselves.
var direct = map[string][]string{
	"gorgonia.org/cu": {"gpu"},
	"net": {"cmd/coordinator", "observe", "feed", "delivery", "cluster/gossip", "cluster/wire", "cluster/certs", "cmd/internal/secure", "cmd/longshore-certs", "storage/s3", "storage/miniotest", "storage/faultproxy",
		"cmd/node", "cmd/longshore-bench", "internal/testports"},
	"os": {"observe", "cmd/internal/config", "feed", "delivery", "actors/quarantine", "gpu", "gpu/internal/cuinit", "storage", "dataset", "cluster/gossip", "cluster/wire", "cluster/certs", "cmd/internal/secure", "cmd/longshore-certs", "storage/s3", "storage/miniotest",
		"cmd/coordinator", "cmd/node", "cmd/longshore-pack", "cmd/longshore-manifest", "cmd/longshore-bench", "cmd/longshore-gpucheck", "cmd/longshore-nvjpegcheck", "cmd/longshore-nvdeccheck", "cmd/longshore-simscale", "cmd/longshore-lineage", "cmd/internal/procmem", "internal/buildversion",
		"examples/feed_server", "examples/go_train", "integration/tools/healthcheck", "integration/tools/upload", "internal/testports", "cmd/internal/config/configtest"},
}

// pure is the core: only the standard library, and of it nothing that
// does I/O, keeps time, locks or draws randomness (the shells do).
var pure = map[string]map[string]string{
	"cluster": {
		"os": "I/O belongs in the shell", "net": "I/O belongs in the shell", "syscall": "I/O belongs in the shell",
		"os/exec": "I/O belongs in the shell", "net/http": "I/O belongs in the shell", "io": "I/O belongs in the shell",
		"io/fs": "I/O belongs in the shell", "time": "time is an abstract Tick here; the shell owns the clock",
		"sync": "one goroutine owns the state machine; no locks needed", "context": "nothing here blocks",
		"math/rand": "randomness comes only from the seed", "math/rand/v2": "randomness comes only from the seed",
		"crypto/rand": "randomness comes only from the seed", "runtime/cgo": "pure Go", "unsafe": "no need",
		"log": "report through Ready and errors, not logs", "log/slog": "report through Ready and errors, not logs",
		"encoding/json": "the journal's encoding belongs to the shell",
	},
}

// stdOnly packages link nothing outside the standard library (and the
// module's own packages they are allowed).
var stdOnly = []string{"cluster", "feed", "decode/spec", "examples/go_train", "storage", "gpu", "gpu/nvjpeg", "internal/clock", "internal/offheap", "internal/jpegcolour", "internal/buildversion", "internal/testports"}

type pkg struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
	Module     *struct{ Path string }
}

func list(t *testing.T, tags string) map[string]pkg {
	t.Helper()
	args := []string{"list", "-deps", "-json=ImportPath,Standard,Imports,Deps,Module"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, module+"/...")...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	return strings.CutPrefix(path, module+"/")
}

func moduleOf(p pkg) string {
	if p.Module == nil {
		return ""
	}
	return p.Module.Path
}

// TestLayers checks every package of the module against the rules, in
// the default build and in the cuda build.
func TestLayers(t *testing.T) {
	for _, tags := range []string{"", "cuda"} {
		pkgs := list(t, tags)
		var names []string
		for path := range pkgs {
			if _, ok := rel(path); ok {
				names = append(names, path)
			}
		}
		sort.Strings(names)
		if len(names) < 20 {
			t.Fatalf("go list found %d packages of the module: %v", len(names), names)
		}
		for _, path := range names {
			name, _ := rel(path)
			p := pkgs[path]
			allowed, known := internal[name]
			if !known {
				t.Errorf("[tags %q] %s is not in the layer rules (internal/layers): say which packages it may import", tags, name)
				continue
			}
			for _, imp := range p.Imports {
				if dep, ok := rel(imp); ok && !slices.Contains(allowed, "*") && !slices.Contains(allowed, dep) {
					t.Errorf("[tags %q] %s imports %s, which its layer does not allow", tags, name, dep)
				}
				if who, ok := direct[imp]; ok && !slices.Contains(who, name) {
					t.Errorf("[tags %q] %s imports %s itself, which only %v may", tags, name, imp, who)
				}
				if why, ok := pure[name][imp]; ok {
					t.Errorf("[tags %q] %s imports %s: %s", tags, name, imp, why)
				}
			}
			for _, never := range unlinked[name] {
				if slices.Contains(p.Deps, module+"/"+never) {
					t.Errorf("[tags %q] %s links %s (%s), which it must not", tags, name, never, linkPath(pkgs, path, module+"/"+never))
				}
			}
			throughGPU := tags == "cuda" && (name == "gpu" || slices.Contains(p.Deps, module+"/gpu"))
			for _, d := range p.Deps {
				dp := pkgs[d]
				mod := moduleOf(dp)
				if throughGPU && slices.Contains(cudaModules, mod) {
					continue // CUDA's, through gpu: allowed in the cuda build
				}
				for dep, who := range reach {
					if (d == dep || strings.HasPrefix(d, dep+"/") || mod == dep) && !slices.Contains(who, name) {
						t.Errorf("[tags %q] %s links %s (through %s), which only %v may", tags, name, dep, d, who)
						break
					}
				}
				if slices.Contains(stdOnly, name) && !dp.Standard {
					if _, own := rel(d); !own && d != "C" {
						t.Errorf("[tags %q] %s links %s: it uses only the standard library", tags, name, d)
					}
				}
			}
		}
	}
	// cu reaches nothing in the default build, and gpu in the cuda build
	// (the check above would pass vacuously if the tag built nothing).
	if p, ok := list(t, "cuda")[module+"/gpu"]; !ok || !slices.Contains(p.Imports, "gorgonia.org/cu") {
		t.Errorf("[tags cuda] gpu does not import gorgonia.org/cu: the CUDA implementation is missing from the cuda build")
	}
	// Rules about packages that are gone are stale: keep the list true.
	pkgs := list(t, "")
	for name := range internal {
		if _, ok := pkgs[module+"/"+name]; !ok {
			t.Errorf("the layer rules name %s, which does not exist", name)
		}
	}
}

// linkPath is a chain of imports from the package from to to, for the
// error message: "a -> b -> c".
func linkPath(pkgs map[string]pkg, from, to string) string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var chain []string
			for p := cur; p != ""; p = prev[p] {
				name, _ := rel(p)
				chain = append([]string{name}, chain...)
			}
			return strings.Join(chain, " -> ")
		}
		for _, imp := range pkgs[cur].Imports {
			if _, seen := prev[imp]; !seen {
				prev[imp] = cur
				queue = append(queue, imp)
			}
		}
	}
	return "through a dependency"
}
