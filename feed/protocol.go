package feed

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Version is the feed protocol version this package speaks (see
// docs/feed-protocol.md). Version 2 adds rollbacks (cluster mode): the
// rollback message, eras on batches and commits, end_of_stream. The
// server also accepts MinVersion: a version-1 trainer is told of a
// rollback by a fatal rolled_back error instead. Version 3 adds the
// sample spec (video clips and audio waveforms, any dtype and shape): the
// welcome's spec, the batch's shape and short marks. A node serving
// images speaks 1 to 3 alike; one serving video or audio refuses hellos
// below 3 (their batches have no 4-dimensional uint8 dims). Version 4
// adds the trainer's ended message: it read the End. A standalone rank
// is over only then (the End written to the socket may sit unread there,
// behind batches, when the trainer stops and comes back from its
// checkpoint); to a trainer of version 3 or older, the End written is the
// end of its rank, as before.
const Version = 4

// MinVersion is the oldest hello version the server accepts.
const MinVersion = 1

// Frame limits. A frame is a 4-byte little-endian length n, then n bytes:
// one type byte and a JSON payload.
const (
	// MaxClientFrame bounds what a trainer may send: control messages only
	// (hello, release, commit, bye, ended), none near 64 KiB.
	MaxClientFrame = 64 << 10
	// MaxServerFrame bounds a batch descriptor: 4096 samples with 1 KiB
	// keys fit; pixels never travel in frames.
	MaxServerFrame = 16 << 20
	// MaxReleaseIDs bounds one release message.
	MaxReleaseIDs = 4096
	// MaxTokenBytes bounds a resume token in a hello.
	MaxTokenBytes = 4096
)

// MsgType is a frame's type byte.
type MsgType uint8

// Trainer -> server.
const (
	MsgHello   MsgType = 1
	MsgRelease MsgType = 2
	MsgCommit  MsgType = 3
	MsgBye     MsgType = 4
	MsgEnded   MsgType = 5 // version 4: the trainer read the End
)

// Server -> trainer.
const (
	MsgWelcome   MsgType = 16
	MsgRegion    MsgType = 17 // carries one file descriptor (SCM_RIGHTS)
	MsgBatch     MsgType = 18
	MsgCommitted MsgType = 19
	MsgEpochEnd  MsgType = 20
	MsgEnd       MsgType = 21
	MsgError     MsgType = 22
	MsgRollback  MsgType = 23 // version 2
	// MsgDeviceRegion announces a device allocation exported with CUDA
	// IPC; sent only to a hello that asked for device batches.
	MsgDeviceRegion MsgType = 24
)

func (t MsgType) String() string {
	switch t {
	case MsgHello:
		return "hello"
	case MsgRelease:
		return "release"
	case MsgCommit:
		return "commit"
	case MsgBye:
		return "bye"
	case MsgEnded:
		return "ended"
	case MsgWelcome:
		return "welcome"
	case MsgRegion:
		return "region"
	case MsgBatch:
		return "batch"
	case MsgCommitted:
		return "committed"
	case MsgEpochEnd:
		return "epoch_end"
	case MsgEnd:
		return "end"
	case MsgError:
		return "error"
	case MsgRollback:
		return "rollback"
	case MsgDeviceRegion:
		return "device_region"
	case MsgFields:
		return "fields"
	}
	return fmt.Sprintf("MsgType(%d)", uint8(t))
}

// Error codes in Error messages.
const (
	CodeProtocol      = "protocol"       // malformed or unexpected message; fatal
	CodeVersion       = "version"        // unsupported protocol version; fatal
	CodeBusy          = "busy"           // another trainer holds the rank; fatal
	CodeBadToken      = "bad_token"      // resume token refused; fatal
	CodeBadCommit     = "bad_commit"     // commit of a step not delivered or going back; not fatal
	CodeCommitFailed  = "commit_failed"  // the Committer failed; not fatal
	CodeFailureBudget = "failure_budget" // the run stopped on its failure budget; fatal
	CodePipeline      = "pipeline"       // the rank's pipeline stopped with an error; fatal
	CodeShutdown      = "shutdown"       // the node is shutting down; fatal
	// CodeRolledBack answers a commit (not fatal) whose batch belongs to a
	// delivery era that ended: the rank rolled back; the trainer restores
	// its last acknowledged commit. To a version-1 trainer it also reports
	// the rollback itself (fatal: reconnect after restoring).
	CodeRolledBack = "rolled_back"
	// CodeStaleToken: the hello's token is not the rank's last
	// acknowledged commit; a running cluster cannot go back to it: restart
	// the job with the coordinator's --resume TOKEN. Fatal.
	CodeStaleToken = "stale_token"
)

// Hello is the trainer's first message.
type Hello struct {
	Version int `json:"version"`
	// Rank, if not -1, must match the socket's rank (a guard against a
	// trainer opening the wrong socket).
	Rank *int `json:"rank,omitempty"`
	// Token resumes from a commit (a checkpoint's data cursor). Empty: the
	// server's last commit for the rank, or the start.
	Token  []byte `json:"token,omitempty"`
	Client string `json:"client,omitempty"`
	// Device "cuda" asks for batches on the device (DeliveryCUDAIPC) when
	// the node has them; "": host memory only.
	Device string `json:"device,omitempty"`
	// Fields asks for the samples' fields (fields.go): the schema in
	// the welcome, a fields frame before each batch. A node that predates
	// fields ignores it (the welcome then has no schema).
	Fields bool `json:"fields,omitempty"`
}

// Deliveries, in a Welcome.
const (
	DeliveryHost    = "host"     // batches in shared host memory
	DeliveryCUDAIPC = "cuda_ipc" // batches also on the device, through CUDA IPC
)

// DeviceRef names a GPU.
type DeviceRef struct {
	// Ordinal is the device's index in the node's visible devices.
	Ordinal int `json:"ordinal"`
	// UUID ("GPU-…") names it whatever either process's
	// CUDA_VISIBLE_DEVICES: the trainer maps it to its own index.
	UUID string `json:"uuid"`
	Name string `json:"name,omitempty"`
}

// DeviceRegion announces a device allocation exported with CUDA IPC:
// Handle is cuIpcGetMemHandle's 64 bytes; the trainer opens it once
// (cuIpcOpenMemHandle) and closes it before it disconnects.
type DeviceRegion struct {
	Region uint64    `json:"region"`
	Device DeviceRef `json:"device"`
	Handle []byte    `json:"handle"`
	Size   int64     `json:"size"`
}

// Cursor names the next batch of a rank's stream: step Step of epoch
// Epoch. A step past the end of its epoch means step 0 of the next.
type Cursor struct {
	Epoch int   `json:"epoch"`
	Step  int64 `json:"step"`
}

// After is the cursor following batch (epoch, step).
func After(epoch int, step int64) Cursor { return Cursor{Epoch: epoch, Step: step + 1} }

// Less orders cursors (epoch, then step).
func (c Cursor) Less(d Cursor) bool {
	return c.Epoch < d.Epoch || c.Epoch == d.Epoch && c.Step < d.Step
}

// SampleShape is a sample's geometry in a Welcome (images and video
// frames; zero for audio).
type SampleShape struct {
	Height   int `json:"height"`
	Width    int `json:"width"`
	Channels int `json:"channels"`
}

// Sample kinds and dtypes in a SampleSpec.
const (
	KindImage = "image"
	KindVideo = "video"
	KindAudio = "audio"
	// KindRaw: a sample's object bytes, undecoded (--media raw): rows of
	// uint8 [R], the first RawHeader bytes of a row the node's, then the
	// sample's bytes, BatchDesc.Lengths long (docs/feed-protocol.md,
	// "Raw samples").
	KindRaw = "raw"
	// RawHeader is the bytes at the start of a raw row before the
	// sample's.
	RawHeader = 8

	DTypeUint8    = "uint8"
	DTypeFloat32  = "float32"  // little-endian
	DTypeFloat16  = "float16"  // IEEE 754 binary16, little-endian (images: --dtype)
	DTypeBFloat16 = "bfloat16" // float32's upper half, little-endian (images: --dtype)
)

// SampleSpec (version 3) is what one sample is: Kind, DType, Shape (one
// sample's dimensions, outermost first: [3,H,W] or [H,W,3] for images,
// [T,3,H,W] or [T,H,W,3] for video, [C,S] for audio) and Layout (the
// batch's, batch dimension included: "NCHW", "NHWC", "NTCHW", "NTHWC",
// "NCS").
type SampleSpec struct {
	Kind   string `json:"kind"`
	DType  string `json:"dtype"`
	Shape  []int  `json:"shape"`
	Layout string `json:"layout"`
}

// ItemSize is the bytes of one element of DType, 0 if unknown.
func (s SampleSpec) ItemSize() int {
	switch s.DType {
	case DTypeUint8:
		return 1
	case DTypeFloat16, DTypeBFloat16:
		return 2
	case DTypeFloat32:
		return 4
	}
	return 0
}

// Welcome answers a Hello.
type Welcome struct {
	Version   int         `json:"version"`
	Job       string      `json:"job"`
	Rank      int         `json:"rank"`
	BatchSize int         `json:"batch_size"`
	Slots     int         `json:"slots"`
	SlotBytes int         `json:"slot_bytes"`
	Sample    SampleShape `json:"sample"`
	Layout    string      `json:"layout"`
	DType     string      `json:"dtype"`
	// Spec is the sample spec (version 3); nil from older nodes: an
	// image, Sample in Layout, uint8.
	Spec *SampleSpec `json:"spec,omitempty"`
	// Resume is where delivery starts.
	Resume Cursor `json:"resume"`
	// EpochSteps is how many batches each epoch of the rank's stream has
	// (a whole epoch, whatever Resume says), when the node knows it (a
	// standalone node); 0 (absent): not known (cluster mode, where the
	// coordinator plans and re-plans a rank's share, or an older node).
	EpochSteps int64 `json:"epoch_steps,omitempty"`
	// Mode is "standalone" or "cluster" (version 2).
	Mode string `json:"mode,omitempty"`
	// Era is the rank's delivery era (version 2, cluster mode): it grows
	// at every rollback or reset; batches carry it and commits name it.
	Era uint64 `json:"era,omitempty"`
	// Committed is the rank's last acknowledged commit, if the node knows
	// one (version 2, cluster mode).
	Committed *Rollback `json:"committed,omitempty"`
	// Device is the rank's GPU, when the node runs one rank per device
	// (--gpus): the trainer should use this one.
	Device *DeviceRef `json:"device,omitempty"`
	// Delivery is DeliveryHost or DeliveryCUDAIPC (the hello asked for
	// device batches and the node exports them). "" from older nodes:
	// host.
	Delivery string `json:"delivery,omitempty"`
	// Fields is the dataset's schema, when the hello asked for fields and
	// the dataset has some: each batch then comes after a MsgFields
	// frame holding its rows' values, a column per entry, in this order.
	Fields []FieldSpec `json:"fields,omitempty"`
}

// Region announces a shared-memory region; the frame carries its file
// descriptor (a memfd, sealed against shrinking) as SCM_RIGHTS.
type Region struct {
	Region uint64 `json:"region"`
	Size   int64  `json:"size"`
}

// BatchDesc describes a ready batch: its samples are bytes [Offset,
// Offset+NBytes) of region Region, DType, Shape (version 3; images also
// Dims) in Layout.
type BatchDesc struct {
	ID     uint64 `json:"id"`
	Region uint64 `json:"region"`
	Offset int64  `json:"offset"`
	NBytes int64  `json:"nbytes"`
	// Dims is an image batch's [N,3,H,W] or [N,H,W,3]; zero for video
	// and audio.
	Dims [4]int `json:"dims"`
	// Shape (version 3) is the batch's dimensions, N first, any rank.
	Shape []int `json:"shape,omitempty"`
	// Short (version 3, video and audio) marks samples shorter than
	// their window, padded (audio with zeros, video with its last frame).
	Short []bool `json:"short,omitempty"`
	// Lengths (version 3, raw samples) is each row's sample's length:
	// row r's bytes are [RawHeader, RawHeader+Lengths[r]) of the row.
	Lengths   []int64  `json:"lengths,omitempty"`
	Layout    string   `json:"layout"`
	DType     string   `json:"dtype"`
	Epoch     int      `json:"epoch"`
	Step      int64    `json:"step"`
	Labels    []int32  `json:"labels"`
	Keys      []string `json:"keys"`
	Indices   []int64  `json:"indices"`
	Positions []int64  `json:"positions"`
	Pads      []bool   `json:"pads"`
	Failed    int      `json:"failed"`
	// Filled marks rows that hold no sample of their own: a failed
	// sample's place, filled with a copy (pixels, label, key, index,
	// position, pad) of the next unfilled row of the batch, wrapping, so
	// the batch keeps its shape. Absent when no row is filled (always
	// with the node's --short-batches, where failed samples are left
	// out). Older clients ignore it and see the copies as samples.
	Filled []bool `json:"filled,omitempty"`
	// Era is the delivery era the batch belongs to (version 2).
	Era uint64 `json:"era,omitempty"`
	// EndOfStream: the last batch of the rank's stream for Epoch as
	// planned now (cluster mode): commit it, or the epoch never completes.
	EndOfStream bool `json:"end_of_stream,omitempty"`
	// DeviceRegion, when not 0, says the pixels are also bytes
	// [DeviceOffset, DeviceOffset+NBytes) of that device region (a
	// DeviceRegion message came first), copied completely before this
	// message was sent: no stream wait is needed to read them. The
	// device slot is reused only after the batch is released.
	DeviceRegion uint64 `json:"device_region,omitempty"`
	DeviceOffset int64  `json:"device_offset,omitempty"`
}

// Release gives batches back. Stall, when set, carries the trainer's
// data-stall accounting of the steps since its last report: a node that
// does not know the field ignores it, so a client sends it to any node.
type Release struct {
	IDs   []uint64     `json:"ids"`
	Stall *StallReport `json:"stall,omitempty"`
}

// StallReport is the trainer's accounting of some steps, one entry per
// step in order (both slices the same length): WaitUS[i] is how long the
// trainer waited for the step's batch (from asking for it to having it),
// ComputeUS[i] how long it then spent before asking for the next one
// (its compute, as the loader sees it), in microseconds of its monotonic
// clock. The stall share of a run is sum(WaitUS) / (sum(WaitUS) +
// sum(ComputeUS)).
type StallReport struct {
	WaitUS    []int64 `json:"wait_us"`
	ComputeUS []int64 `json:"compute_us"`
	// Headspace, if set, is a headspace run since the last report: the
	// trainer's steps on replayed cached batches, which never wait.
	Headspace *Headspace `json:"headspace,omitempty"`
}

// Headspace is a trainer's compute ceiling, measured by replaying cached
// batches at full speed: Steps steps took ComputeUS microseconds in all.
type Headspace struct {
	Steps     int64 `json:"steps"`
	ComputeUS int64 `json:"compute_us"`
}

// MaxStallSteps bounds the steps one StallReport carries.
const MaxStallSteps = 1024

// Validate checks a report from a trainer.
func (r *StallReport) Validate() error {
	if len(r.WaitUS) != len(r.ComputeUS) {
		return fmt.Errorf("stall report of %d waits and %d computes: want one of each per step", len(r.WaitUS), len(r.ComputeUS))
	}
	if len(r.WaitUS) > MaxStallSteps {
		return fmt.Errorf("stall report of %d steps, limit %d", len(r.WaitUS), MaxStallSteps)
	}
	for i := range r.WaitUS {
		if r.WaitUS[i] < 0 || r.ComputeUS[i] < 0 {
			return fmt.Errorf("stall report step %d: negative time (wait %d us, compute %d us)", i, r.WaitUS[i], r.ComputeUS[i])
		}
	}
	if h := r.Headspace; h != nil && (h.Steps < 0 || h.ComputeUS < 0) {
		return fmt.Errorf("stall report headspace of %d steps, %d us: negative", h.Steps, h.ComputeUS)
	}
	return nil
}

// Commit asks for a resume token covering every batch through (Epoch,
// Step). Req is echoed in the answer.
type Commit struct {
	Req   uint64 `json:"req"`
	Epoch int    `json:"epoch"`
	Step  int64  `json:"step"`
	// Era is the era of the batch committed (version 2; 0: the current
	// one). A commit of an era that ended is answered rolled_back.
	Era uint64 `json:"era,omitempty"`
}

// Committed answers a Commit.
type Committed struct {
	Req   uint64 `json:"req"`
	Epoch int    `json:"epoch"`
	Step  int64  `json:"step"`
	Token []byte `json:"token"`
}

// EpochEnd says every batch of Epoch has been sent.
type EpochEnd struct {
	Epoch int `json:"epoch"`
	// Last (version 4, standalone): the stream's last epoch ended: the
	// End comes next. A trainer that stops here (one epoch of a
	// DataLoader-style loop) says ended, as at the End.
	Last bool `json:"last,omitempty"`
}

// End says the job's last batch has been sent.
type End struct{}

// Rollback (version 2, cluster mode) says the rank's delivery era ended
// under the trainer (the coordinator restarted, the node was evicted):
// batches after the rank's last acknowledged commit will be delivered
// again. The trainer restores the model of that commit (Epoch, Step,
// Token; Committed false: none, restore the initial model) and reads on:
// the next batches are of era Era and continue at Step+1.
type Rollback struct {
	Epoch     int    `json:"epoch"`
	Step      int64  `json:"step"`
	Token     []byte `json:"token,omitempty"`
	Committed bool   `json:"committed"`
	Era       uint64 `json:"era,omitempty"`
	Message   string `json:"message,omitempty"`
}

// ErrorMsg reports a problem. Fatal errors are followed by the server
// closing the connection.
type ErrorMsg struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Fatal   bool            `json:"fatal"`
	Req     uint64          `json:"req,omitempty"`
	Report  json.RawMessage `json:"report,omitempty"`
}

// Errors reading frames.
var (
	ErrFrameTooLarge = errors.New("feed: frame too large")
	ErrEmptyFrame    = errors.New("feed: empty frame")
)

// AppendFrame appends a frame of type t with payload v (JSON) to dst.
func AppendFrame(dst []byte, t MsgType, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("feed: encode %s: %w", t, err)
	}
	var hdr [5]byte
	binary.LittleEndian.PutUint32(hdr[:4], uint32(len(body)+1))
	hdr[4] = byte(t)
	dst = append(dst, hdr[:]...)
	return append(dst, body...), nil
}

// ReadFrame reads one frame of at most max bytes (type byte included) into
// buf (reused when large enough) and returns its type and payload.
func ReadFrame(r io.Reader, max int, buf []byte) (MsgType, []byte, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, buf, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n == 0 {
		return 0, nil, buf, ErrEmptyFrame
	}
	if uint64(n) > uint64(max) {
		return 0, nil, buf, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, buf, err
	}
	return MsgType(buf[0]), buf[1:], buf, nil
}

// ClientMsg is a decoded trainer message: T and exactly one other field
// are set.
type ClientMsg struct {
	T       MsgType
	Hello   *Hello
	Release *Release
	Commit  *Commit
}

// ParseClientMsg validates a trainer frame (the server's side of the
// protocol). Any error is a protocol
// violation: the server answers with an Error and closes the connection.
func ParseClientMsg(t MsgType, payload []byte) (ClientMsg, error) {
	m := ClientMsg{T: t}
	var err error
	switch t {
	case MsgHello:
		m.Hello = new(Hello)
		err = json.Unmarshal(payload, m.Hello)
		if err == nil && len(m.Hello.Token) > MaxTokenBytes {
			err = fmt.Errorf("token of %d bytes, limit %d", len(m.Hello.Token), MaxTokenBytes)
		}
		if err == nil && m.Hello.Rank != nil && *m.Hello.Rank < -1 {
			err = fmt.Errorf("rank %d", *m.Hello.Rank)
		}
	case MsgRelease:
		m.Release = new(Release)
		err = json.Unmarshal(payload, m.Release)
		if err == nil && len(m.Release.IDs) > MaxReleaseIDs {
			err = fmt.Errorf("%d ids in one release, limit %d", len(m.Release.IDs), MaxReleaseIDs)
		}
		if err == nil && m.Release.Stall != nil {
			err = m.Release.Stall.Validate()
		}
	case MsgCommit:
		m.Commit = new(Commit)
		err = json.Unmarshal(payload, m.Commit)
		if err == nil && (m.Commit.Epoch < 0 || m.Commit.Step < 0) {
			err = fmt.Errorf("commit of epoch %d step %d", m.Commit.Epoch, m.Commit.Step)
		}
	case MsgBye, MsgEnded:
		if len(payload) > 0 {
			var v struct{}
			err = json.Unmarshal(payload, &v)
		}
	default:
		return m, fmt.Errorf("feed: unexpected message type %d from trainer", uint8(t))
	}
	if err != nil {
		return m, fmt.Errorf("feed: bad %s message: %w", t, err)
	}
	return m, nil
}

// CodeForbidden: the connecting process's uid and gid are not allowed
// to use this node's feed (Config.Peers). Fatal.
const CodeForbidden = "forbidden"
