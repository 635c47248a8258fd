package check

import (
	"errors"
	"testing"
)

const testBillingAccount = "012345-6789AB-CDEF01"

// The security rules hold for every environment, and what they check is
// there to check: an SSL policy, a Cloud Armor policy, the Identity Platform
// configuration and the topics; a budget exactly when a billing account is
// given.
func TestSecurityRules(t *testing.T) {
	res, errs := envResults(t)
	for _, env := range Environments {
		t.Run(env, func(t *testing.T) {
			if err := errs[env]; err != nil {
				t.Fatal(err)
			}
			p := res[env].PlanJSON
			for _, e := range SecurityRules(p, res[env].Graph) {
				t.Error(e)
			}
			for _, want := range [][2]string{
				{"google_compute_ssl_policy", "api"},
				{"google_compute_security_policy", "api"},
				{"google_identity_platform_config", "main"},
				{"google_pubsub_topic", "topic"},
				{"google_storage_bucket", "erasure_log"},
			} {
				if len(p.Instances(want[0], want[1])) == 0 {
					t.Errorf("%s.%s is not planned", want[0], want[1])
				}
			}
			cfg := p.Instances("google_identity_platform_config", "main")[""]
			if on, _ := cfg.Get("sign_in", 0, "anonymous", 0, "enabled").(bool); on {
				t.Error("anonymous sign-in is on by default")
			}
			if n := len(p.Instances("google_billing_budget", "monthly")); n != 0 {
				t.Errorf("%d budgets planned without a billing account", n)
			}
		})
	}
	t.Run("dev with a billing account", func(t *testing.T) {
		t.Parallel()
		r, err := toolchain.CheckEnvironment(copyOf(t, nil), "dev", "-var", "billing_account="+testBillingAccount)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(r.PlanJSON.Instances("google_billing_budget", "monthly")); n != 1 {
			t.Fatalf("%d budgets planned with a billing account, want 1", n)
		}
		for _, e := range SecurityRules(r.PlanJSON, r.Graph) {
			t.Error(e)
		}
	})
	// Prod's budget is above what its minimum sizes cost idle; a budget
	// below it fails the idle budget rule.
	for _, tc := range []struct {
		name string
		vars []string
		want string
	}{
		{"prod with a billing account", nil, ""},
		{"broken: prod's budget below its idle cost", []string{"-var", "monthly_budget=1000"},
			"idle budget rule: module.engagement.google_billing_budget.monthly[0] is 1000 a month, not above the"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := toolchain.CheckEnvironment(copyOf(t, nil), "prod", append([]string{"-var", "billing_account=" + testBillingAccount}, tc.vars...)...)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(r.PlanJSON.Instances("google_billing_budget", "monthly")); n != 1 {
				t.Fatalf("%d budgets planned with a billing account, want 1", n)
			}
			errs := SecurityRules(r.PlanJSON, r.Graph)
			if tc.want == "" {
				for _, e := range errs {
					t.Error(e)
				}
				idle, err := IdleOf(r.PlanJSON)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("prod idle: %s, $%.0f a month at list prices", idle, idle.MonthlyCost())
				return
			}
			if !containsErr(errs, tc.want) {
				t.Fatalf("the security rules did not report %q: %v", tc.want, errors.Join(errs...))
			}
		})
	}
	t.Run("dev with erasure log operators", func(t *testing.T) {
		t.Parallel()
		r, err := toolchain.CheckEnvironment(copyOf(t, nil), "dev", "-var", `erasure_log_operators=["group:ops@example.com"]`)
		if err != nil {
			t.Fatal(err)
		}
		roles := map[string]bool{}
		for _, g := range r.PlanJSON.Instances("google_storage_bucket_iam_member", "erasure_log_operator") {
			if g.Str("member") != "group:ops@example.com" {
				t.Errorf("%s grants %q", g.Address, g.Str("member"))
			}
			roles[g.Str("role")] = true
		}
		if len(roles) != 2 || !roles["roles/storage.objectViewer"] || !roles["roles/storage.objectCreator"] {
			t.Errorf("the operators are granted %v, want roles/storage.objectViewer and objectCreator", roles)
		}
		for _, e := range SecurityRules(r.PlanJSON, r.Graph) {
			t.Error(e)
		}
	})
	t.Run("dev with anonymous sign-in allowed", func(t *testing.T) {
		t.Parallel()
		r, err := toolchain.CheckEnvironment(copyOf(t, nil), "dev", "-var", "allow_anonymous_sign_in=true")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range SecurityRules(r.PlanJSON, r.Graph) {
			t.Error(e)
		}
	})
}

// Copies of the tree broken on purpose still plan, and the security rules
// report each breakage. Two copies carry all of them, to keep the plans few.
func TestSecurityRulesFailWhenBroken(t *testing.T) {
	needToolchain(t)
	cases := []struct {
		name string
		edit func(root string)
		vars []string
		want []string
	}{
		{
			name: "TLS 1.0, no XSS rule, anonymous accounts refused but allowed, duplicate e-mails, topic retention, erasure log open, short and read",
			edit: func(root string) {
				replaceIn(t, "api.tf", `min_tls_version = "TLS_1_2"`, `min_tls_version = "TLS_1_0"`)(root)
				replaceIn(t, "api.tf", `    "xss-v33-stable"  = { priority = 901, description = "Cross-site scripting (OWASP CRS 3.3)." }`+"\n", "")(root)
				replaceIn(t, "identity.tf", "enabled = var.allow_anonymous_sign_in", "enabled = true")(root)
				replaceIn(t, "identity.tf", "allow_duplicate_emails = false", "allow_duplicate_emails = true")(root)
				replaceIn(t, "erasurelog.tf", `public_access_prevention    = "enforced"`, `public_access_prevention    = "inherited"`)(root)
				replaceIn(t, "erasurelog.tf", "retention_period = local.erasure_log_retention_days * 86400", "retention_period = 86400")(root)
				replaceIn(t, "erasurelog.tf", `role   = "roles/storage.objectCreator"`, `role   = "roles/storage.objectAdmin"`)(root)
				replaceIn(t, "pubsub.tf", "resource \"google_pubsub_topic\" \"dead_letter\" {\n  for_each = local.dead_letter_topics\n", "resource \"google_pubsub_topic\" \"dead_letter\" {\n  for_each = local.dead_letter_topics\n\n  message_retention_duration = \"604800s\"\n")(root)
			},
			want: []string{
				`TLS rule: module.engagement.google_compute_ssl_policy.api has min_tls_version "TLS_1_0"`,
				"TLS rule: google_compute_target_https_proxy.api uses google_compute_ssl_policy.api, which allows less than TLS 1.2",
				"armor rule: module.engagement.google_compute_security_policy.api has no deny rule evaluating the preconfigured WAF rule set xss-*",
				`sign-in rule: function Counts accepts anonymous accounts=false (AUTH_SIGN_IN_PROVIDERS "password,google.com"), but Identity Platform's anonymous sign-in is enabled=true`,
				"sign-in rule: module.engagement.google_identity_platform_config.main[0] allows several accounts per e-mail address",
				`retention rule: topic module.engagement.google_pubsub_topic.dead_letter["counter-events-dead"] keeps messages for "604800s"`,
				`erasure log rule: module.engagement.google_storage_bucket.erasure_log has public_access_prevention "inherited"`,
				"erasure log rule: module.engagement.google_storage_bucket.erasure_log keeps entries 24h0m0s, want at least a day more than the longest backup (336h0m0s",
				`erasure log rule: module.engagement.google_storage_bucket_iam_member.erasure_log_writer grants "roles/storage.objectAdmin" on the erasure log`,
			},
		},
		{
			name: "proxy without SSL policy, no Adaptive Protection, SQLi rule after the throttle, budget only at 100%, erasure log operators may delete",
			edit: func(root string) {
				replaceIn(t, "api.tf", "  ssl_policy       = google_compute_ssl_policy.api.id\n", "")(root)
				replaceIn(t, "api.tf", "      enable          = true\n", "      enable          = false\n")(root)
				replaceIn(t, "billing.tf", "current    = [0.5, 0.9, 1.0]", "current    = [1.0]")(root)
				replaceIn(t, "api.tf", `"sqli-v33-stable" = { priority = 900,`, `"sqli-v33-stable" = { priority = 2000,`)(root)
				replaceIn(t, "erasurelog.tf", `erasure_log_operator_roles = ["roles/storage.objectViewer", "roles/storage.objectCreator"]`, `erasure_log_operator_roles = ["roles/storage.objectViewer", "roles/storage.objectAdmin"]`)(root)
			},
			vars: []string{"-var", "billing_account=" + testBillingAccount, "-var", `erasure_log_operators=["group:ops@example.com"]`},
			want: []string{
				"TLS rule: module.engagement.google_compute_target_https_proxy.api has no SSL policy of this configuration",
				"armor rule: module.engagement.google_compute_security_policy.api has no Adaptive Protection",
				"armor rule: module.engagement.google_compute_security_policy.api evaluates sqli-* at priority 2000, after the throttle rule for every address at priority 1000: it is never reached",
				"budget rule: module.engagement.google_billing_budget.monthly[0] alerts on current spend at [1], want 100% and at least one threshold below it",
				`erasure log rule: module.engagement.google_storage_bucket_iam_member.erasure_log_operator["group:ops@example.com roles/storage.objectAdmin"] grants "roles/storage.objectAdmin" on the erasure log`,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := toolchain.CheckEnvironment(copyOf(t, tc.edit), "dev", tc.vars...)
			if err != nil {
				t.Fatalf("the broken copy must still plan (only the rule may catch it): %v", err)
			}
			errs := SecurityRules(r.PlanJSON, r.Graph)
			for _, want := range tc.want {
				if !containsErr(errs, want) {
					t.Errorf("the security rules did not report %q; they said: %v", want, errors.Join(errs...))
				} else {
					t.Logf("fails as it must: %s", want)
				}
			}
		})
	}
}
