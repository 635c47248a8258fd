package capacity

import (
	"fmt"
	"io"
	"slices"
)

// Plans loads and models each environment of the repository at root.
func Plans(root string, envs []string) ([]*Plan, *Costs, error) {
	c, err := LoadCosts(root)
	if err != nil {
		return nil, nil, err
	}
	var plans []*Plan
	for _, env := range envs {
		d, err := LoadDeployment(root, env)
		if err != nil {
			return nil, nil, err
		}
		prof, err := ProfileFor(env)
		if err != nil {
			return nil, nil, err
		}
		p, err := Model(d, c, prof)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", env, err)
		}
		plans = append(plans, p)
	}
	return plans, c, nil
}

// Write writes the capacity document of envs (docs/capacity.md) under
// stamp: each environment's plan, the measured costs it used, Google's
// figures, and the assumptions.
func Write(w io.Writer, root string, envs []string, stamp string) ([]*Plan, error) {
	plans, c, err := Plans(root, envs)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(w, "# Capacity plan")
	fmt.Fprintln(w)
	fmt.Fprintln(w, stamp)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "What each environment's Terraform deploys (`terraform/envs/<env>`, the module's defaults and the expressions of `functions.tf`), "+
		"checked against the load it is built for from the per-operation costs the benchmarks measured (`%s`). "+
		"The same model runs in `make test` (`go test ./internal/capacity/`), which fails when an environment does not carry its load with %g× headroom "+
		"or a scheduled function cannot run all the jobs that overlap by design.\n\n", CostsFile, Headroom)
	for _, p := range plans {
		WriteTable(w, p)
	}
	var used []string
	for _, p := range plans {
		for _, f := range p.Figures {
			if !slices.Contains(used, f) {
				used = append(used, f)
			}
		}
	}
	slices.Sort(used)
	fmt.Fprintln(w, "## Measured costs used")
	fmt.Fprintln(w)
	WriteCosts(w, c, used)
	fmt.Fprintln(w, "## Google's figures")
	fmt.Fprintln(w)
	WriteSources(w)
	fmt.Fprint(w, assumptions)
	return plans, nil
}

const assumptions = `## Assumptions, and what would invalidate them

- **Seed rates.** Prod carries the design load: 50,000 reactions/s on one
  item, 50,000 comments/s on one video, 250,000 count reads/s of 50 ids,
  100,000 views/s, all at once. Dev is built for a thousandth of it (50
  reactions/s, 50 comments/s, 250 count reads/s, 100 views/s: the rates of
  the local benchmarks and the soak, for integration and release checks,
  not a second production); its scheduled functions are checked in full,
  since schedules do not scale with load.
  Half the count reads are signed in; none is assumed answered by Cloud
  CDN, so the origin carries a cold cache. A larger signed-in share, or
  another hot path (exports, erasures, history reads, which have no seed
  rate and are not modelled), needs its own figures.
- **Measured on the emulators, on a shared 2-core machine.** CPU per
  operation is the serving process's (every function of the path in one
  process, and for comments, views and counts the benchmark's own clients
  too): an upper bound of what the function that takes the request spends,
  charged whole to it. The time a request holds its slot is the benchmark's
  clients in flight over its rate (Little's law); a consumer's time a
  message is the time the local stack's push endpoint was busy with it
  (each event function takes one push at a time there, as deployed).
  The emulator runs one read-write transaction at a time and the machine
  was shared (the uptime of each run is above), so these times are longer
  than Cloud Spanner's: a quieter run lowers the sizes, and figures from a
  real project (Cloud Monitoring's request latencies and CPU) replace them.
- **Batching factors, from the code and the runs.** A reaction transaction
  and its Pub/Sub message carry the requests that arrived while the
  previous one ran (group commit): the measured messages per 1,000 reactions
  hold at the benchmark's concurrency (64 clients); an instance that takes
  fewer requests at once forms smaller groups and sends more messages. The
  same holds for comments and for History's batches of watches
  (` + "`HISTORY_BATCH_LINGER`" + `, up to 500 watches a message). Views are folded
  into Spanner by the rollup about once a second per partition, so their
  Spanner commits follow time, not rate.
- **Spanner** is sized from row writes (mutations counted on the wire) and
  read calls, each counted as one of the published operations per node:
  index entries (a reaction row has two) and a read's many rows are not
  counted, which the published per-node figures, measured on small rows,
  may not absorb. The autoscaler's high-priority CPU target sets the
  capacity it runs at the load.
- **Bigtable** rows per operation are counted from the code (the rate
  limits' window rows, the history entry, mark and claim), every write
  taken by every cluster (replication) and every read by one (failover).
- **Pub/Sub** bills each publish and each push as at least 1,000 bytes;
  each message is counted as its own publish request (the client's bundling
  only lowers it).
- **Scheduled functions** hold a request for their run's bound as the code
  sets it (the rollup's minute and a margin, the reconciliation's and the
  detection's 9 minutes, the expiry's budget), capped by the function's
  timeout; runs that end as the next begins count as overlapping. Cloud
  Scheduler does not retry (` + "`retry_count = 0`" + `), and Cloud Run answers 429 to
  a request no instance takes in time, so every overlapping run needs a
  slot of its own: a run that waited for another's minute would be refused.
- **Event functions** take ` + "`function_defaults.event.concurrency`" + ` pushes at
  once (` + "`host.Push`" + `): their instances are sized by the larger of the messages
  in flight over that concurrency and the CPU the messages need, from each
  consumer's CPU per message at the deployed concurrency (the consumers
  benchmark, ` + "`docs/benchmarks/consumers.md`" + `).
- **Regions.** Every function, job and push subscription runs in each
  region of the environment with the same limits, and one region carries
  the whole load alone when the other is lost: each function's limits are
  checked against the whole load, per region, and the Cloud Run CPU quota
  of each region against twice that region's CPU at the whole load. Each
  region's subscriptions deliver every message to that region's consumers
  (docs/operations.md, "A region lost"): the event functions run the whole
  consumer load in every region even with both up, and each message's
  second application (outbox read of a counter message; history rewrite
  and claim check of a watch, counted from the code) is work on Spanner
  and Bigtable, in the sizes above.
- **Autoscaler maxima and quotas.** Spanner's and Bigtable's autoscaler
  maxima are at least twice the need at their CPU targets; the quotas asked
  for (` + "`quota_requests`" + `) at least those maxima and the Cloud Run need.
  Bigtable documents up to 20 minutes under load before added nodes help
  (https://cloud.google.com/bigtable/docs/scaling) and refuses a maximum
  above 10× the minimum: a surge from the minimum to the design load is
  served late while the clusters grow; the minimum, not the maximum, is the
  capacity at hand in those minutes.
`
