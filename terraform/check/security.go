package check

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// TopicsWithRetention names the topics allowed to keep messages of their own
// (message_retention_duration), with why. None is: redelivery is the
// subscriptions' retention of unacknowledged messages, dead-lettered messages
// wait on their dead-letter subscription, and nothing seeks a subscription
// back in time; topic retention would keep delivered messages, which hold
// user ids, for days after an account's erasure.
var TopicsWithRetention = map[string]string{}

// WAFRuleSets are the preconfigured Cloud Armor rule sets every security
// policy evaluates, by the prefix of their name (the version may move on).
var WAFRuleSets = []string{"sqli-", "xss-"}

// SecurityRules are the rules on what the public front door accepts and what
// is kept: TLS, Cloud Armor, the accounts accepted, the budget, topic
// retention and the erasure log.
func SecurityRules(p *Plan, g *Graph) []error {
	var errs []error
	for _, r := range []func(*Plan, *Graph) []error{TLSRule, ArmorRule, SignInRule, BudgetRule, IdleBudgetRule, RetentionRule, ErasureLogRule} {
		errs = append(errs, r(p, g)...)
	}
	return errs
}

// TLSRule: every HTTPS proxy names an SSL policy of this apply whose floor
// is TLS 1.2 with the MODERN or RESTRICTED profile (the default policy
// accepts TLS 1.0).
func TLSRule(p *Plan, g *Graph) []error {
	var errs []error
	policies := map[string]bool{} // blocks of compliant policies
	for block, rcs := range instancesOf(p) {
		if blockType(block) != "google_compute_ssl_policy" {
			continue
		}
		ok := true
		for _, rc := range rcs {
			if v := rc.Str("min_tls_version"); v != "TLS_1_2" && v != "TLS_1_3" {
				errs = append(errs, fmt.Errorf("TLS rule: %s has min_tls_version %q, want TLS_1_2 or TLS_1_3", rc.Address, v))
				ok = false
			}
			if v := rc.Str("profile"); v != "MODERN" && v != "RESTRICTED" {
				errs = append(errs, fmt.Errorf("TLS rule: %s has profile %q, want MODERN or RESTRICTED", rc.Address, v))
				ok = false
			}
		}
		policies[block] = ok
	}
	for block, rcs := range instancesOf(p) {
		if blockType(block) != "google_compute_target_https_proxy" {
			continue
		}
		var uses []string
		for _, d := range g.Edges[block] {
			if blockType(d) == "google_compute_ssl_policy" {
				uses = append(uses, d)
			}
		}
		for _, rc := range rcs {
			unknown, _ := dig(rc.Change.AfterUnknown, "ssl_policy").(bool)
			if len(uses) == 0 || (!unknown && rc.Str("ssl_policy") == "") {
				errs = append(errs, fmt.Errorf("TLS rule: %s has no SSL policy of this configuration: it accepts TLS 1.0 and 1.1", rc.Address))
			}
		}
		for _, u := range uses {
			if !policies[u] {
				errs = append(errs, fmt.Errorf("TLS rule: %s uses %s, which allows less than TLS 1.2 with a MODERN or RESTRICTED profile", block, u))
			}
		}
	}
	return errs
}

// ArmorRule: every Cloud Armor policy has Adaptive Protection on and a rule
// evaluating each of WAFRuleSets whose action refuses the request (it may
// run in preview: docs/identity.md says why), placed before every enforced
// rule that allows requests: Cloud Armor applies the first matching rule,
// so a WAF rule after an "allow" (or a throttle's conform "allow") for all
// addresses is never evaluated.
func ArmorRule(p *Plan, _ *Graph) []error {
	var errs []error
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" || rc.Type != "google_compute_security_policy" {
			continue
		}
		if on, _ := rc.Get("adaptive_protection_config", 0, "layer_7_ddos_defense_config", 0, "enable").(bool); !on {
			errs = append(errs, fmt.Errorf("armor rule: %s has no Adaptive Protection (layer-7 DDoS defense)", rc.Address))
		}
		rules, _ := rc.Get("rule").([]any)
		// The first enforced rule that lets every address through.
		firstAllow, allowDesc := math.Inf(1), ""
		for _, r := range rules {
			action, _ := dig(r, "action").(string)
			preview, _ := dig(r, "preview").(bool)
			ranges := fmt.Sprint(dig(r, "match", 0, "config", 0, "src_ip_ranges"))
			conform, _ := dig(r, "rate_limit_options", 0, "conform_action").(string)
			if preview || ranges != "[*]" || !(action == "allow" || (action == "throttle" && conform == "allow")) {
				continue
			}
			if prio, _ := dig(r, "priority").(float64); prio < firstAllow {
				firstAllow, allowDesc = prio, action
			}
		}
		for _, set := range WAFRuleSets {
			found := false
			for _, r := range rules {
				expr, _ := dig(r, "match", 0, "expr", 0, "expression").(string)
				action, _ := dig(r, "action").(string)
				if !strings.Contains(expr, "evaluatePreconfiguredWaf('"+set) || !strings.HasPrefix(action, "deny") {
					continue
				}
				found = true
				if prio, _ := dig(r, "priority").(float64); prio >= firstAllow {
					errs = append(errs, fmt.Errorf("armor rule: %s evaluates %s* at priority %v, after the %s rule for every address at priority %v: it is never reached", rc.Address, set, prio, allowDesc, firstAllow))
				}
			}
			if !found {
				errs = append(errs, fmt.Errorf("armor rule: %s has no deny rule evaluating the preconfigured WAF rule set %s*", rc.Address, set))
			}
		}
	}
	return errs
}

// SignInRule: the Identity Platform configuration makes accounts that cost
// something (e-mail addresses unique, passwords required), and the
// functions accept anonymous accounts exactly when Identity Platform lets
// anyone make one, so that turning one on without the other is a choice
// nobody made. Without a configuration here (auth_audience names another
// project) there is nothing to compare.
func SignInRule(p *Plan, _ *Graph) []error {
	var errs []error
	anonymousOn, configured := false, false
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" || rc.Type != "google_identity_platform_config" {
			continue
		}
		configured = true
		if v, _ := rc.Get("sign_in", 0, "anonymous", 0, "enabled").(bool); v {
			anonymousOn = true
		}
		if v, _ := rc.Get("sign_in", 0, "allow_duplicate_emails").(bool); v {
			errs = append(errs, fmt.Errorf("sign-in rule: %s allows several accounts per e-mail address", rc.Address))
		}
		if on, _ := rc.Get("sign_in", 0, "email", 0, "enabled").(bool); on {
			if req, _ := rc.Get("sign_in", 0, "email", 0, "password_required").(bool); !req {
				errs = append(errs, fmt.Errorf("sign-in rule: %s lets e-mail accounts sign in without a password", rc.Address))
			}
		}
	}
	if !configured {
		// Another project issues the tokens (auth_audience) and is
		// configured there.
		return errs
	}
	for key, rc := range p.Instances("google_cloudfunctions2_function", "fn") {
		providers, ok := rc.Get("service_config", 0, "environment_variables", "AUTH_SIGN_IN_PROVIDERS").(string)
		if !ok {
			continue
		}
		if accepts := slices.Contains(strings.Split(providers, ","), "anonymous"); accepts != anonymousOn {
			errs = append(errs, fmt.Errorf("sign-in rule: function %s accepts anonymous accounts=%v (AUTH_SIGN_IN_PROVIDERS %q), but Identity Platform's anonymous sign-in is enabled=%v", key, accepts, providers, anonymousOn))
		}
	}
	return errs
}

// BudgetRule: a budget alerts at 100% of its amount spent and at least once
// before, and notifies someone: the billing admins or an alert channel.
func BudgetRule(p *Plan, _ *Graph) []error {
	var errs []error
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" || rc.Type != "google_billing_budget" {
			continue
		}
		var current []float64
		rules, _ := rc.Get("threshold_rules").([]any)
		for _, r := range rules {
			basis, _ := dig(r, "spend_basis").(string)
			if pct, ok := dig(r, "threshold_percent").(float64); ok && (basis == "" || basis == "CURRENT_SPEND") {
				current = append(current, pct)
			}
		}
		sort.Float64s(current)
		if len(current) < 2 || current[0] >= 1 || !slices.Contains(current, 1.0) {
			errs = append(errs, fmt.Errorf("budget rule: %s alerts on current spend at %v, want 100%% and at least one threshold below it", rc.Address, current))
		}
		chans, _ := rc.Get("all_updates_rule", 0, "monitoring_notification_channels").([]any)
		unknown := dig(rc.Change.AfterUnknown, "all_updates_rule", 0, "monitoring_notification_channels") != nil
		admins, _ := rc.Get("all_updates_rule", 0, "disable_default_iam_recipients").(bool)
		if len(chans) == 0 && !unknown && admins {
			errs = append(errs, fmt.Errorf("budget rule: %s notifies nobody (no alert channel, billing admins disabled)", rc.Address))
		}
	}
	return errs
}

// RetentionRule: no topic keeps messages of its own unless
// TopicsWithRetention names it.
func RetentionRule(p *Plan, _ *Graph) []error {
	var errs []error
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" || rc.Type != "google_pubsub_topic" {
			continue
		}
		if _, ok := TopicsWithRetention[rc.Str("name")]; ok {
			continue
		}
		unknown, _ := dig(rc.Change.AfterUnknown, "message_retention_duration").(bool)
		if v := rc.Str("message_retention_duration"); v != "" || unknown {
			errs = append(errs, fmt.Errorf("retention rule: topic %s keeps messages for %q; delivered messages would outlive an erasure (TopicsWithRetention names the topics that need it)", rc.Address, v))
		}
	}
	return errs
}
