package main

import "github.com/longshore/longshore/gpu/nvjpeg"

// image is one file of the dataset in the check's pinned buffer.
type image struct {
	name     string
	off, len int
	w, h     int
	path     nvjpeg.Path
	kind     string // path/subsampling/process, for --dump's spread
}

// spread picks n images round-robin over their kinds (path, subsampling,
// process), in dataset order within each, so the pixel check sees every
// kind the dataset has and not only its most common one.
func spread(imgs []image, n int) []image {
	var kinds []string
	by := map[string][]image{}
	for _, im := range imgs {
		if _, ok := by[im.kind]; !ok {
			kinds = append(kinds, im.kind)
		}
		by[im.kind] = append(by[im.kind], im)
	}
	var out []image
	for len(out) < n {
		took := false
		for _, k := range kinds {
			if len(by[k]) > 0 && len(out) < n {
				out = append(out, by[k][0])
				by[k] = by[k][1:]
				took = true
			}
		}
		if !took {
			break
		}
	}
	return out
}
