package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
)

// rankText names a rank: a standalone rank's number, a cluster rank's
// name and the session that delivered the step.
func rankText(rank int, name, session string) string {
	if name == "" {
		return strconv.Itoa(rank)
	}
	return name + " (session " + session + ")"
}

// write prints the answer: JSON, or one line per sample.
func write(w io.Writer, asJSON bool, a *Answer) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(a)
	}
	b := bufio.NewWriter(w)
	j := a.Job
	if m := j.Mixture; m != nil {
		fmt.Fprintf(b, "mixture: %d positions an epoch (rounds of %d)", m.Positions, m.Round)
		for _, src := range m.Sources {
			fmt.Fprintf(b, "; %s: %s, %d samples (%d excluded), indices [%d, %d)", src.Name, src.Dataset, src.Samples, src.Excluded, src.Offset, src.Offset+src.Samples)
		}
		if m.Schedule != "" {
			fmt.Fprintf(b, "; schedule %s", m.Schedule)
		}
		fmt.Fprintln(b)
		j.Dataset = "--mixture " + m.Spec
	}
	if j.Mode == "cluster" {
		fmt.Fprintf(b, "cluster job: journal %s generation %d; %s, %d samples (%d excluded), seed %d, block %d, window %d, batch size %d, %d epoch(s), %s %d %s\n",
			j.Checkpoint, j.Generation, j.Dataset, j.Samples, j.Excluded, j.Seed, j.Block, j.Window, j.BatchSize, j.Epochs, j.Transform, j.Size, j.Media)
	} else {
		fmt.Fprintf(b, "job: %s, %d samples (%d excluded), seed %d, block %d, window %d, %d rank(s), batch size %d, %d epoch(s)",
			j.Dataset, j.Samples, j.Excluded, j.Seed, j.Block, j.Window, j.Ranks, j.BatchSize, j.Epochs)
		if j.DropLast {
			fmt.Fprint(b, ", drop-last")
		}
		fmt.Fprintf(b, ", %s %d %s; %d sample(s) and %d step(s) a rank per epoch\n", j.Transform, j.Size, j.Media, j.StreamLen, j.Steps)
	}
	if j.DType != "" && j.DType != "uint8" {
		fmt.Fprintf(b, "samples are %s (the pixel digests are of those values)\n", j.DType)
	}
	if a.Key != "" {
		fmt.Fprintf(b, "key %s (index %d) appeared %d time(s):\n", a.Key, *a.Index, len(a.Appearances))
		for _, h := range a.Appearances {
			pad := ""
			if h.Pad {
				pad = " (padding)"
			}
			if h.Uncertain {
				pad += " (uncertain)"
			}
			fmt.Fprintf(b, "  epoch %d rank %s step %d slot %d (stream offset %d)%s\n", h.Epoch, rankText(h.Rank, h.RankName, h.Session), h.Step, h.Slot, h.Offset, pad)
		}
	}
	for _, s := range a.Steps {
		unsure := ""
		if s.Uncertain {
			unsure = " (uncertain: see note)"
		}
		fmt.Fprintf(b, "epoch %d rank %s step %d: %d samples%s\n", s.Epoch, rankText(s.Rank, s.RankName, s.Session), s.Step, len(s.Samples), unsure)
		for _, x := range s.Samples {
			fmt.Fprintf(b, "  %3d  index %d  %s  label %d", x.Slot, x.Index, x.Key, x.Label)
			if x.Class != "" {
				fmt.Fprintf(b, " (%s)", x.Class)
			}
			if x.Source != "" && x.SourceIndex != nil && x.SourceEpoch != nil {
				fmt.Fprintf(b, "  source %s index %d (its epoch %d)", x.Source, *x.SourceIndex, *x.SourceEpoch)
			}
			for _, k := range slices.Sorted(maps.Keys(x.Fields)) {
				switch v := x.Fields[k].(type) {
				case string:
					fmt.Fprintf(b, "  %s=%q", k, v)
				case []byte:
					fmt.Fprintf(b, "  %s=<%d bytes>", k, len(v))
				default:
					fmt.Fprintf(b, "  %s=%v", k, v)
				}
			}
			if x.Object != "" {
				fmt.Fprintf(b, "  in %s@%d", x.Object, x.ObjectOffset)
			}
			if x.Pad {
				fmt.Fprint(b, "  pad")
			}
			if x.Crop != nil {
				fmt.Fprintf(b, "  %dx%d crop x=%d y=%d w=%d h=%d flip=%v", x.Width, x.Height, x.Crop.X, x.Crop.Y, x.Crop.W, x.Crop.H, *x.Flip)
				if x.VFlip != nil {
					fmt.Fprintf(b, " vflip=%v", *x.VFlip)
				}
				for _, d := range x.PixelDraws {
					switch {
					case d.Factor != nil:
						fmt.Fprintf(b, " %s=%.4f", d.Op, *d.Factor)
					case d.Gray != nil:
						fmt.Fprintf(b, " %s=%v", d.Op, *d.Gray)
					}
				}
				fmt.Fprintf(b, " px:%s", x.Pixels)
			}
			if x.ClipDraws != nil {
				fmt.Fprintf(b, "  %dx%d frames at", x.Width, x.Height)
				for _, ft := range x.FrameTimes {
					fmt.Fprintf(b, " %.3f", ft)
				}
				fmt.Fprintf(b, " s")
				if x.Short {
					fmt.Fprint(b, " (short: last frame repeated)")
				}
				fmt.Fprintf(b, ", draws start=%.3f x=%.3f y=%.3f px:%s", x.ClipDraws[0], x.ClipDraws[1], x.ClipDraws[2], x.Pixels)
			}
			if x.Error != "" {
				fmt.Fprintf(b, "  error: %s", x.Error)
			}
			fmt.Fprintln(b)
		}
	}
	if a.Note != "" {
		fmt.Fprintf(b, "note: %s\n", a.Note)
	}
	return b.Flush()
}
