package capacity

import (
	"github.com/videngage/engagement/shared/objects"
)

// goMemLimitShare is the part of an instance's memory its GOMEMLIMIT is
// set to (terraform/modules/engagement/functions.tf).
const goMemLimitShare = 0.75

// planPrepareExport checks PrepareExport's memory: each push holds its
// export's Cloud Storage writer, whose chunk buffer is what a push holds
// live (docs/benchmarks/prepareexport.md), and an instance holds its
// concurrency's pushes at once; their buffers, with headroom, must fit
// within GOMEMLIMIT.
func (p *Plan) planPrepareExport() {
	fn, ok := p.Deployment.Functions["PrepareExport"]
	if !ok {
		return
	}
	pushes := max(fn.Concurrency, 1)
	chunkMiB := float64(objects.ChunkSize) / (1 << 20)
	held, limit := float64(pushes)*chunkMiB, goMemLimitShare*fn.MemoryMiB
	if Headroom*held > limit {
		p.violate("PrepareExport: %d pushes at once × a %g MiB writer chunk (objects.ChunkSize) = %.0f MiB live: less than %g× headroom under GOMEMLIMIT, %.0f MiB (%.0f%% of %.0f MiB); lower its concurrency or raise its memory",
			pushes, chunkMiB, held, Headroom, limit, goMemLimitShare*100, fn.MemoryMiB)
	}
}
