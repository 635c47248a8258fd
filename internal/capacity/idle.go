package capacity

import "fmt"

// hoursPerMonth is an average month: 365 × 24 / 12.
const hoursPerMonth = 730

// Idle is what a deployment keeps running with no load: its minimum sizes.
type Idle struct {
	SpannerPU     float64 // fixed processing units, or the autoscaler's minimum
	BigtableNodes float64 // every cluster's minimum (or fixed) nodes
	Instances     []IdleInstances
}

// IdleInstances are a function's minimum instances in one region.
type IdleInstances struct {
	Name      string
	Count     float64
	CPU       float64 // vCPU of one instance
	MemoryMiB float64
}

// MonthlyCost is what the minimum sizes cost a month at list prices (USD):
// Spanner at the regional Standard node-hour (a lower bound for an
// Enterprise Plus multi-region instance), Bigtable SSD node-hours, and the
// minimum instances at the active vCPU and memory rates (an upper bound of
// what Cloud Run bills an idle minimum instance).
func (i Idle) MonthlyCost() float64 {
	hour := i.SpannerPU/1000*priceSpannerNodeHour + i.BigtableNodes*priceBigtableNodeHour
	for _, in := range i.Instances {
		hour += in.Count * (in.CPU*priceVCPUSecond + in.MemoryMiB/1024*priceGiBSecond) * 3600
	}
	return hour * hoursPerMonth
}

func (i Idle) String() string {
	var n float64
	for _, in := range i.Instances {
		n += in.Count
	}
	return fmt.Sprintf("%.0f Spanner PU, %.0f Bigtable nodes, %.0f minimum function instances", i.SpannerPU, i.BigtableNodes, n)
}
