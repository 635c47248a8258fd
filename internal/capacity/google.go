package capacity

// Google's published figures the model plans with, each with the page it
// comes from. Throughputs are "under optimal conditions", per node.

// Source is a published figure's origin.
type Source struct {
	Figure string
	URL    string
	Note   string
}

// Sources lists every published figure the model uses, for the report.
var Sources = []Source{
	{"Spanner throughput per node (1,000 processing units): regional 22,500 reads/s or 3,500 writes/s; dual- and multi-region 15,000 reads/s per region or 2,700 writes/s",
		"https://cloud.google.com/spanner/docs/performance", ""},
	{"Spanner compute capacity: 1,000 processing units are one node", "https://cloud.google.com/spanner/docs/compute-capacity", ""},
	{"Bigtable throughput per SSD node: up to 17,000 rows/s read or 14,000 rows/s written (1 KB rows)",
		"https://cloud.google.com/bigtable/docs/performance", ""},
	{"Cloud Run autoscaling keeps instances at about 60% CPU; a request that finds no instance within the maximum waits in a queue, then fails with 429",
		"https://cloud.google.com/run/docs/about-instance-autoscaling",
		"the page read gives the queue as up to 60 s; the model counts on no queueing at all: every request a schedule or the design load makes at once needs a slot"},
	{"Cloud Run maximum instances are bounded by the region's CPU and memory quotas (e.g. a 1,000 vCPU baseline allows 1,000 one-vCPU instances of one service)",
		"https://cloud.google.com/run/docs/configuring/max-instances-limits", ""},
	{"Cloud Run (functions 2nd gen) request-based billing, Tier 1: $0.000024 per vCPU-second, $0.0000025 per GiB-second, $0.40 per million requests",
		"https://cloud.google.com/run/pricing", ""},
	{"Pub/Sub throughput: $40 per TiB published or delivered, at least 1,000 bytes billed per publish, push or pull request",
		"https://cloud.google.com/pubsub/pricing", ""},
	{"Spanner compute: $0.90 per node-hour (regional, Standard edition, us-central1)",
		"https://cloud.google.com/spanner/pricing",
		"the copies of the page read had no price table; this is the long-standing regional list price. Enterprise Plus and multi-region configurations (prod's nam6) cost more per node-hour, so prod's Spanner line is a lower bound"},
	{"Bigtable: $0.65 per SSD node-hour (us-central1)",
		"https://cloud.google.com/bigtable/pricing",
		"the copies of the page read had no price table; this is the long-standing list price"},
}

// Throughput per Spanner node and Bigtable SSD node.
const (
	spannerRegionalReadsPerNode  = 22_500
	spannerRegionalWritesPerNode = 3_500
	spannerMultiReadsPerNode     = 15_000 // per region
	spannerMultiWritesPerNode    = 2_700
	bigtableReadRowsPerNode      = 17_000
	bigtableWriteRowsPerNode     = 14_000
)

// Cloud Run's autoscaler keeps instances at about this CPU utilisation.
const cloudRunCPUTarget = 0.6

// regionalVCPUQuota is the documented example baseline of a region's
// Cloud Run CPU quota; a project's own quota is on its quotas page and is
// raised on request.
const regionalVCPUQuota = 1000

// List prices, USD.
const (
	priceVCPUSecond       = 0.000024
	priceGiBSecond        = 0.0000025
	pricePerMillionReqs   = 0.40
	pricePubSubTiB        = 40.0
	pubSubMinBillBytes    = 1000
	priceSpannerNodeHour  = 0.90
	priceBigtableNodeHour = 0.65
)
