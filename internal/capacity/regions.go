package capacity

import (
	"fmt"
	"math"

	"github.com/zclconf/go-cty/cty"
)

// Quotas are what the environment's Terraform asks Google Cloud for
// (quota_requests: Cloud Quotas preferences, quotas.tf), in the units the
// model plans in; nil when it asks for none (dev stays within the defaults).
type Quotas struct {
	RunVCPUPerRegion     int // Cloud Run CPU in each region the functions run in
	SpannerNodes         int // Spanner nodes of the instance's configuration
	BigtableNodesPerZone int // Bigtable SSD nodes in each cluster's zone
}

// Need is one quota the plan needs against what Terraform asks for.
type Need struct {
	Quota string
	Need  float64 // what the plan needs, headroom included
	Asked int     // what quota_requests asks for (0: nothing)
	Unit  string
}

// readRegions reads extra_regions: every function, job and push
// subscription runs in region and in each of them.
func (d *Deployment) readRegions(input func(string) (cty.Value, error)) error {
	d.Regions = []string{d.Region}
	v, err := input("extra_regions")
	if err != nil {
		return err
	}
	if v.IsNull() {
		return nil
	}
	if !v.CanIterateElements() {
		return fmt.Errorf("extra_regions is not a list")
	}
	for it := v.ElementIterator(); it.Next(); {
		_, r := it.Element()
		s, err := str(r)
		if err != nil {
			return fmt.Errorf("extra_regions: %w", err)
		}
		d.Regions = append(d.Regions, s)
	}
	return nil
}

// readQuotas reads quota_requests (null: none).
func (d *Deployment) readQuotas(input func(string) (cty.Value, error)) error {
	v, err := input("quota_requests")
	if err != nil {
		return err
	}
	if v.IsNull() {
		return nil
	}
	var errs []error
	num := func(name string) int {
		if !v.Type().IsObjectType() || !v.Type().HasAttribute(name) {
			errs = append(errs, fmt.Errorf("quota_requests has no %s", name))
			return 0
		}
		n, err := integer(v.GetAttr(name))
		if err != nil {
			errs = append(errs, fmt.Errorf("quota_requests.%s: %w", name, err))
		}
		return n
	}
	d.Quotas = &Quotas{RunVCPUPerRegion: num("run_vcpu_per_region"), SpannerNodes: num("spanner_nodes"), BigtableNodesPerZone: num("bigtable_nodes_per_zone")}
	if len(errs) > 0 {
		return fmt.Errorf("%v", errs)
	}
	return nil
}

// planRegions holds the deployment to carrying the load from one region:
// every function runs in every region with the same limits, each region's
// push subscriptions deliver every message to that region's consumers, and
// each region's jobs fire, so one region alone serves the whole load (the
// function checks above, per region); its Cloud Run CPU at the load is
// DesignVCPU, and the quotas below must allow it with headroom.
func (p *Plan) planRegions() {
	d := p.Deployment
	p.RegionVCPU = p.DesignVCPU
	asked := func(f func(q *Quotas) int) int {
		if d.Quotas == nil {
			return 0
		}
		return f(d.Quotas)
	}
	p.Quotas = append(p.Quotas, Need{
		Quota: "Cloud Run CPU in each of " + fmt.Sprint(d.Regions),
		Need:  Headroom * p.RegionVCPU, Asked: asked(func(q *Quotas) int { return q.RunVCPUPerRegion }), Unit: "vCPU",
	})
	// The autoscalers' maxima must be reachable: the quota allows them.
	p.Quotas = append(p.Quotas, Need{
		Quota: "Spanner nodes of " + d.Spanner.Config,
		Need:  math.Ceil(float64(d.Spanner.MaxProcessingUnits) / 1000), Asked: asked(func(q *Quotas) int { return q.SpannerNodes }), Unit: "nodes",
	})
	maxNodes := 0
	for _, c := range d.Bigtable {
		maxNodes = max(maxNodes, c.MaxNodes)
	}
	p.Quotas = append(p.Quotas, Need{
		Quota: "Bigtable SSD nodes in each cluster's zone",
		Need:  float64(maxNodes), Asked: asked(func(q *Quotas) int { return q.BigtableNodesPerZone }), Unit: "nodes",
	})
	if d.Quotas == nil {
		// Within the default quotas, or the environment must ask.
		if Headroom*p.RegionVCPU > regionalVCPUQuota {
			p.violate("Cloud Run: one region needs %.0f vCPU (%.0f at %s × %g headroom), above the %d vCPU example baseline, and quota_requests asks for nothing",
				math.Ceil(Headroom*p.RegionVCPU), p.RegionVCPU, p.Profile.Name, Headroom, regionalVCPUQuota)
		}
		return
	}
	for _, q := range p.Quotas {
		if float64(q.Asked) < q.Need {
			p.violate("quota: %s: quota_requests asks for %d %s, the plan needs %.0f", q.Quota, q.Asked, q.Unit, math.Ceil(q.Need))
		}
	}
}
