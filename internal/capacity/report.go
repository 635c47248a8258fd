package capacity

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/videngage/engagement/shared/topology"
)

// WriteTable writes plan p as a Markdown section: the functions' instances
// and vCPU at the load, the databases, Pub/Sub and the hourly cost, then
// the scheduled functions' overlapping jobs and any shortfall.
func WriteTable(w io.Writer, p *Plan) {
	d := p.Deployment
	fmt.Fprintf(w, "## %s (%s, %s)\n\n", p.Env, p.Profile.Name, d.Region)
	fmt.Fprintf(w, "Load: %s reactions/s on one item, %s comments/s on one video, %s count reads/s of 50 ids (%.0f%% signed in, no CDN hits), %s views/s.\n\n",
		num(p.Profile.ReactionsPerSec), num(p.Profile.CommentsPerSec), num(p.Profile.CountReadsPerSec), p.Profile.SignedInShare*100, num(p.Profile.ViewsPerSec))
	fmt.Fprintln(w, "| function | kind | requests/s | in flight | busy vCPU | instances at load | vCPU at load | max instances × concurrency | headroom (slots / instances) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, fp := range p.Functions {
		head := "—"
		if fp.BusySlots > 0 {
			head = fmt.Sprintf("%.1f× / %.1f×", float64(fp.Slots())/fp.BusySlots, float64(fp.MaxInstances)/math.Max(fp.Instances, 1e-9))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.1f | %s | %s | %d × %d | %s |\n",
			fp.Name, fp.Kind, rate(fp.RequestsPerSec), dec(fp.BusySlots), fp.BusyVCPU, dec(fp.Instances), dec(fp.Instances*fp.CPU), fp.MaxInstances, fp.Concurrency, head)
	}
	fmt.Fprintf(w, "| **all functions** | | | | | | **%s** | | |\n\n", dec(p.DesignVCPU))

	s := d.Spanner
	spannerMax := fmt.Sprintf("fixed %d", s.ProcessingUnits)
	if s.HighPriorityCPUPercent > 0 {
		spannerMax = fmt.Sprintf("autoscaled %d–%d at %.0f%% high-priority CPU", s.ProcessingUnits, s.MaxProcessingUnits, s.HighPriorityCPUPercent)
	}
	var clusters []string
	for _, c := range d.Bigtable {
		clusters = append(clusters, fmt.Sprintf("%s %d–%d", c.ID, c.MinNodes, c.MaxNodes))
	}
	fmt.Fprintln(w, "| resource | work at load | needed at load | needed with headroom | configured |")
	fmt.Fprintln(w, "|---|---|---:|---:|---|")
	fmt.Fprintf(w, "| Spanner processing units (%s, %s) | %s reads/s, %s row writes/s | %s | %s | %s |\n",
		s.Config, s.Edition, num(p.SpannerReadsPerSec), num(p.SpannerWritesPerSec), num(math.Ceil(p.SpannerPU)), num(math.Ceil(p.SpannerPUHeadroom)), spannerMax)
	fmt.Fprintf(w, "| Bigtable nodes per cluster | %s row writes/s, %s row reads/s | %.1f | %.1f | %s |\n",
		num(p.BigtableWritesPerSec), num(p.BigtableReadsPerSec), p.BigtableNodes, p.BigtableNodesHeadroom, strings.Join(clusters, ", "))
	fmt.Fprintf(w, "| Pub/Sub | published + pushed | %.2f MB/s | %.2f MB/s billed (1,000 bytes a request at least) | — |\n\n",
		p.PubSubBytesPerSec/1e6, p.PubSubBilledPerSec/1e6)

	fmt.Fprintf(w, "Hourly cost at the load, list prices: functions $%s (vCPU and memory while serving), requests $%s, Spanner $%s, Bigtable $%s, Pub/Sub $%s: **$%s an hour**.",
		money(p.Cost.Functions), money(p.Cost.Requests), money(p.Cost.Spanner), money(p.Cost.Bigtable), money(p.Cost.PubSub), money(p.Cost.Total()))
	if s.MultiRegion() || s.Edition != "STANDARD" {
		fmt.Fprintf(w, " Spanner is priced at the regional Standard rate; %s %s costs more a node-hour, so that line is a lower bound.", s.Edition, s.Config)
	}
	if p.DuplicateDeliveries > 0 {
		fmt.Fprintf(w, " Every region's subscriptions deliver every message to that region's consumers, so the event functions' lines, the duplicate deliveries' reads and rewrites (Spanner and Bigtable above) and their requests are counted %d times.", 1+p.DuplicateDeliveries)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Regions: %s, each running every function, job and push subscription. With one region lost, the other carries the whole load alone: **%s vCPU of Cloud Run in that region** (every function's instances at the load above, all in one region; each function's limits are per region).\n\n",
		strings.Join(d.Regions, ", "), dec(p.RegionVCPU))
	fmt.Fprintln(w, "| quota the plan needs | needed (2× headroom, or the autoscaler's maximum) | asked (`quota_requests`) |")
	fmt.Fprintln(w, "|---|---:|---:|")
	for _, q := range p.Quotas {
		asked := "— (none asked)"
		if d.Quotas != nil {
			asked = fmt.Sprintf("%s %s", num(float64(q.Asked)), q.Unit)
		}
		fmt.Fprintf(w, "| %s | %s %s | %s |\n", q.Quota, num(math.Ceil(q.Need)), q.Unit, asked)
	}
	fmt.Fprintln(w)
	if d.Quotas == nil {
		fmt.Fprintf(w, "No quota is asked for: the Cloud Run need stays under the documented example baseline of %s vCPU a region.\n\n", num(regionalVCPUQuota))
	}

	writePrices(w, p)

	fmt.Fprintln(w, "Scheduled functions, the most runs in flight at once (each run holding its request up to its own bound, capped by the function's timeout):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| function | run bound | timeout | peak runs at once | at | runs then | slots |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---|---|---:|")
	for _, fp := range p.Functions {
		if fp.Kind != topology.KindScheduled {
			continue
		}
		fmt.Fprintf(w, "| %s | %v | %ds | %d | %s | %s | %d |\n", fp.Name, fp.RunBound, fp.Timeout, fp.Overlap.Peak, clock(fp.Overlap.At), countJobs(fp.Overlap.Jobs), fp.Slots())
	}
	fmt.Fprintln(w)
	writeDetection(w, p)
	if len(p.Violations) == 0 {
		fmt.Fprintf(w, "Every check passes: each function's instances × concurrency and vCPU, Spanner and Bigtable carry %s with %g× headroom, and every scheduled function runs all its overlapping jobs at once.\n\n", p.Profile.Name, Headroom)
		return
	}
	fmt.Fprintf(w, "**Shortfalls (%d):**\n\n", len(p.Violations))
	for _, v := range p.Violations {
		fmt.Fprintf(w, "- %s\n", v)
	}
	fmt.Fprintln(w)
}

// countJobs is "reconcile-slices ×10, reconcile-hourly".
func countJobs(jobs []string) string {
	// A fanned-out job's copies (<name>-<k>, four or more) are one entry.
	copies := map[string]map[string]bool{}
	for _, j := range jobs {
		if i := strings.LastIndex(j, "-"); i > 0 {
			if _, err := strconv.Atoi(j[i+1:]); err == nil {
				if copies[j[:i]] == nil {
					copies[j[:i]] = map[string]bool{}
				}
				copies[j[:i]][j] = true
			}
		}
	}
	n := map[string]int{}
	var order []string
	for _, j := range jobs {
		if i := strings.LastIndex(j, "-"); i > 0 && len(copies[j[:i]]) >= 4 && copies[j[:i]][j] {
			j = fmt.Sprintf("%s-<k> (%d jobs)", j[:i], len(copies[j[:i]]))
		}
		if n[j] == 0 {
			order = append(order, j)
		}
		n[j]++
	}
	sort.Strings(order)
	var out []string
	for _, j := range order {
		if n[j] > 1 {
			out = append(out, fmt.Sprintf("%s ×%d", j, n[j]))
		} else {
			out = append(out, j)
		}
	}
	return strings.Join(out, ", ")
}

// WriteCosts lists the measured figures the plans used and their runs.
func WriteCosts(w io.Writer, c *Costs, used []string) {
	fmt.Fprintln(w, "| figure | value | what | run |")
	fmt.Fprintln(w, "|---|---:|---|---|")
	runs := map[string]bool{}
	for _, n := range used {
		f := c.Figures[n]
		runs[f.Run] = true
		fmt.Fprintf(w, "| `%s` | %s %s | %s | %s |\n", n, dec(f.Value), f.Unit, f.What, f.Run)
	}
	fmt.Fprintln(w)
	for _, r := range sortedKeys(runs) {
		run := c.Runs[r]
		fmt.Fprintf(w, "- **%s**: `%s` at `%s`, %s, on %s (`%s`).", r, run.Command, run.Commit, run.Date, run.Machine, run.Uptime)
		if run.Note != "" {
			fmt.Fprintf(w, " %s.", strings.TrimSuffix(run.Note, "."))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

// WriteSources lists Google's published figures with their pages.
func WriteSources(w io.Writer) {
	for _, s := range Sources {
		fmt.Fprintf(w, "- %s: <%s>", s.Figure, s.URL)
		if s.Note != "" {
			fmt.Fprintf(w, " (%s)", s.Note)
		}
		fmt.Fprintln(w, ".")
	}
	fmt.Fprintln(w)
}

func num(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

func dec(x float64) string {
	switch {
	case x == 0:
		return "0"
	case x >= 100:
		return num(x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

func rate(x float64) string {
	if x > 0 && x < 0.1 {
		return fmt.Sprintf("%.4f", x)
	}
	return dec(x)
}

func money(x float64) string {
	if x >= 100 {
		return num(x)
	}
	return fmt.Sprintf("%.2f", x)
}
