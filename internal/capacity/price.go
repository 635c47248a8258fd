package capacity

import (
	"fmt"
	"io"
	"math"
)

// Kinds of operation the design load is made of, each priced on its own.
const (
	KindReaction  = "reaction"
	KindComment   = "comment"
	KindWatch     = "watch"
	KindCountRead = "count read"
)

// Kinds in the order the report prints them.
var Kinds = []string{KindReaction, KindComment, KindWatch, KindCountRead}

// kindWork is one kind's share of the load's work.
type kindWork struct {
	ops                           float64 // operations a second
	spannerReads, spannerWrites   float64
	bigtableReads, bigtableWrites float64
	pubsubBilled                  float64 // bytes a second
}

// kindOf is the kind of operation each function's cost is charged to; a
// function missing here (the scheduled jobs) is shared by every kind.
// ApplyCounters takes the counter messages of reactions and comments and
// is split between them by messages.
var kindOf = map[string]string{
	"Reactions":    KindReaction,
	"Comments":     KindComment,
	"History":      KindWatch,
	"ApplyHistory": KindWatch,
	"ApplyViews":   KindWatch,
	"Counts":       KindCountRead,
}

// Price is the cost of a million operations of one kind at the load, at
// list prices (USD): the functions that serve and consume it, their
// requests, and its share of Spanner's and Bigtable's nodes and of Pub/Sub's
// bytes.
type Price struct {
	Kind         string
	OpsPerSec    float64
	HourlyCost   float64
	PerMillion   float64
	SharedHourly float64 // only on the total: cost charged to no kind
}

// prices charges the hourly cost to the kinds of operation (cost() first).
func (p *Plan) prices() {
	if len(p.work) == 0 {
		return
	}
	hourly := map[string]float64{}
	var shared float64
	for _, fp := range p.Functions {
		// Its instances and its requests.
		c := p.fnCost[fp.Name]
		r, cm := p.counterMsgs[KindReaction], p.counterMsgs[KindComment]
		switch k, ok := kindOf[fp.Name]; {
		case ok:
			hourly[k] += c
		case fp.Name == "ApplyCounters" && r+cm > 0:
			// By the counter messages each kind sends.
			hourly[KindReaction] += c * r / (r + cm)
			hourly[KindComment] += c * cm / (r + cm)
		default:
			shared += c
		}
	}
	reads, writes := float64(spannerRegionalReadsPerNode), float64(spannerRegionalWritesPerNode)
	if p.Deployment.Spanner.MultiRegion() {
		reads, writes = spannerMultiReadsPerNode, spannerMultiWritesPerNode
	}
	share := func(get func(w *kindWork) float64) map[string]float64 {
		out := map[string]float64{}
		var total float64
		for _, k := range Kinds {
			total += get(p.work[k])
		}
		for _, k := range Kinds {
			if total > 0 {
				out[k] = get(p.work[k]) / total
			}
		}
		return out
	}
	spanner := share(func(w *kindWork) float64 { return w.spannerReads/reads + w.spannerWrites/writes })
	bigtable := share(func(w *kindWork) float64 {
		return w.bigtableReads/bigtableReadRowsPerNode + w.bigtableWrites/bigtableWriteRowsPerNode
	})
	pubsub := share(func(w *kindWork) float64 { return w.pubsubBilled })
	var ops float64
	for _, k := range Kinds {
		w := p.work[k]
		h := hourly[k] + p.Cost.Spanner*spanner[k] + p.Cost.Bigtable*bigtable[k] + p.Cost.PubSub*pubsub[k]
		p.Prices = append(p.Prices, Price{Kind: k, OpsPerSec: w.ops, HourlyCost: h, PerMillion: perMillion(h, w.ops)})
		ops += w.ops
	}
	p.Prices = append(p.Prices, Price{Kind: "all", OpsPerSec: ops, HourlyCost: p.Cost.Total(), PerMillion: perMillion(p.Cost.Total(), ops), SharedHourly: shared})
}

func perMillion(hourly, opsPerSec float64) float64 {
	if opsPerSec == 0 {
		return math.NaN()
	}
	return hourly / (opsPerSec * 3600) * 1e6
}

// writePrices writes the price per million operations of each kind.
func writePrices(w io.Writer, p *Plan) {
	if len(p.Prices) == 0 {
		return
	}
	fmt.Fprintln(w, "Price per million operations at the load, list prices (each kind's functions and requests, and its share of Spanner's and Bigtable's nodes and of Pub/Sub's bytes; the total includes the scheduled jobs, charged to no kind):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| operation | per second | $ an hour | $ per million |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, pr := range p.Prices {
		name := pr.Kind
		if name == "all" {
			name = fmt.Sprintf("**all** (scheduled jobs $%s an hour)", money(pr.SharedHourly))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.2f |\n", name, num(pr.OpsPerSec), money(pr.HourlyCost), pr.PerMillion)
	}
	fmt.Fprintln(w)
}
