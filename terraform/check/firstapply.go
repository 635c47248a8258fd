package check

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/videngage/engagement/internal/capacity"
)

// BigtableMaxScale is how far above its minimum Bigtable lets a cluster's
// autoscaler go: "the maximum node count in your range cannot be more than
// 10 times the minimum" (https://cloud.google.com/bigtable/docs/autoscaling).
// Bigtable refuses a cluster outside it, so the first apply stops there.
const BigtableMaxScale = 10

// BigtableScalingRule: every autoscaled Bigtable cluster has a minimum of
// at least one node and a maximum of at most BigtableMaxScale times it.
func BigtableScalingRule(p *Plan) []error {
	var errs []error
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" || rc.Type != "google_bigtable_instance" {
			continue
		}
		clusters, _ := rc.Get("cluster").([]any)
		for i := range clusters {
			id, _ := dig(clusters, i, "cluster_id").(string)
			if l, _ := dig(clusters, i, "autoscaling_config").([]any); len(l) == 0 {
				continue
			}
			lo, _ := dig(clusters, i, "autoscaling_config", 0, "min_nodes").(float64)
			hi, _ := dig(clusters, i, "autoscaling_config", 0, "max_nodes").(float64)
			switch {
			case lo < 1:
				errs = append(errs, fmt.Errorf("Bigtable scaling rule: %s cluster %s scales down to %v nodes, want at least 1", rc.Address, id, lo))
			case hi > BigtableMaxScale*lo:
				errs = append(errs, fmt.Errorf("Bigtable scaling rule: %s cluster %s scales %v–%v nodes: Bigtable refuses a maximum above %d× the minimum (at least %v nodes for this maximum)", rc.Address, id, lo, hi, BigtableMaxScale, math.Ceil(hi/BigtableMaxScale)))
			case hi < lo:
				errs = append(errs, fmt.Errorf("Bigtable scaling rule: %s cluster %s has maximum %v below its minimum %v", rc.Address, id, hi, lo))
			}
		}
	}
	return errs
}

// OutlierMaxInterval bounds the outlier detection's analysis interval: a
// region whose functions answer 5xx must lose its traffic within a minute.
const OutlierMaxInterval = 30

// OutlierRule: every backend service ejects a backend that answers 5xx:
// outlier detection on consecutive errors, enforced always (the API's
// default enforcement of consecutive 5xx is 0%), analysed at least every
// OutlierMaxInterval seconds, after at most 10 errors in a row, and able to
// eject one of its backends (max_ejection_percent of the backends rounds
// down to at least one).
func OutlierRule(p *Plan) []error {
	var errs []error
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" || rc.Type != "google_compute_backend_service" {
			continue
		}
		od, _ := rc.Get("outlier_detection").([]any)
		if len(od) == 0 {
			errs = append(errs, fmt.Errorf("outlier rule: %s has no outlier detection: a region answering 5xx keeps its share of the traffic", rc.Address))
			continue
		}
		backends, _ := rc.Get("backend").([]any)
		n := rc.Num("outlier_detection", 0, "consecutive_errors")
		enforce := rc.Num("outlier_detection", 0, "enforcing_consecutive_errors")
		interval := rc.Num("outlier_detection", 0, "interval", 0, "seconds")
		pct := rc.Num("outlier_detection", 0, "max_ejection_percent")
		switch {
		case n < 1 || n > 10:
			errs = append(errs, fmt.Errorf("outlier rule: %s ejects after %v consecutive errors, want 1 to 10", rc.Address, n))
		case enforce != 100:
			errs = append(errs, fmt.Errorf("outlier rule: %s enforces consecutive-error ejection at %v%%, want 100%%", rc.Address, enforce))
		case interval < 1 || interval > OutlierMaxInterval:
			errs = append(errs, fmt.Errorf("outlier rule: %s analyses every %vs, want 1 to %ds", rc.Address, interval, OutlierMaxInterval))
		case len(backends) > 1 && math.Floor(pct*float64(len(backends))/100) < 1:
			errs = append(errs, fmt.Errorf("outlier rule: %s may eject %v%% of its %d backends: not even one", rc.Address, pct, len(backends)))
		}
	}
	return errs
}

// IdleOf is what the plan keeps running with no load at all: the Spanner
// instance's fixed or minimum processing units, every Bigtable cluster's
// minimum (or fixed) nodes and every function's minimum instances.
func IdleOf(p *Plan) (capacity.Idle, error) {
	var idle capacity.Idle
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" {
			continue
		}
		switch rc.Type {
		case "google_spanner_instance":
			pu := rc.Num("autoscaling_config", 0, "autoscaling_limits", 0, "min_processing_units")
			if pu == 0 {
				pu = rc.Num("processing_units")
			}
			if pu == 0 {
				return idle, fmt.Errorf("%s: no processing units or autoscaling minimum known at plan time", rc.Address)
			}
			idle.SpannerPU += pu
		case "google_bigtable_instance":
			clusters, _ := rc.Get("cluster").([]any)
			for i := range clusters {
				n, _ := dig(clusters, i, "autoscaling_config", 0, "min_nodes").(float64)
				if n == 0 {
					n, _ = dig(clusters, i, "num_nodes").(float64)
				}
				idle.BigtableNodes += n
			}
		case "google_cloudfunctions2_function":
			min := rc.Num("service_config", 0, "min_instance_count")
			if min == 0 {
				continue
			}
			cpu, err := strconv.ParseFloat(rc.Str("service_config", 0, "available_cpu"), 64)
			if err != nil {
				return idle, fmt.Errorf("%s: available_cpu %q: %v", rc.Address, rc.Str("service_config", 0, "available_cpu"), err)
			}
			mem, err := memoryMiB(rc.Str("service_config", 0, "available_memory"))
			if err != nil {
				return idle, fmt.Errorf("%s: %v", rc.Address, err)
			}
			idle.Instances = append(idle.Instances, capacity.IdleInstances{Name: rc.Address, Count: min, CPU: cpu, MemoryMiB: mem})
		}
	}
	return idle, nil
}

func memoryMiB(s string) (float64, error) {
	for suffix, mul := range map[string]float64{"Gi": 1024, "Mi": 1, "G": 1e9 / (1 << 20), "M": 1e6 / (1 << 20)} {
		if v, ok := strings.CutSuffix(s, suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f * mul, nil
			}
		}
	}
	return 0, fmt.Errorf("memory %q is not a size in Mi or Gi", s)
}

// IdleBudgetRule: every monthly budget of the plan is above what the
// plan's minimum sizes cost a month doing nothing (capacity.Idle at list
// prices), or the budget alerts every month on an idle project and nobody
// reads it any more. A plan without a billing account has no budget; the
// tests plan each environment with one.
func IdleBudgetRule(p *Plan, _ *Graph) []error {
	budgets := p.Instances("google_billing_budget", "monthly")
	if len(budgets) == 0 {
		return nil
	}
	idle, err := IdleOf(p)
	if err != nil {
		return []error{fmt.Errorf("idle budget rule: %v", err)}
	}
	cost := idle.MonthlyCost()
	var errs []error
	keys := make([]string, 0, len(budgets))
	for k := range budgets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		rc := budgets[k]
		units, err := strconv.ParseFloat(rc.Str("amount", 0, "specified_amount", 0, "units"), 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("idle budget rule: %s: amount %q is not a number known at plan time", rc.Address, rc.Str("amount", 0, "specified_amount", 0, "units")))
			continue
		}
		if units <= cost {
			errs = append(errs, fmt.Errorf("idle budget rule: %s is %.0f a month, not above the %.0f its minimum sizes cost idle (%s)", rc.Address, units, cost, idle))
		}
	}
	return errs
}
