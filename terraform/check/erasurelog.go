package check

import (
	"fmt"
	"math"
	"time"
)

// operatorRoles are the roles the erasure log's operators are granted.
var operatorRoles = map[string]bool{"roles/storage.objectViewer": true, "roles/storage.objectCreator": true}

// ErasureLogRule: the erasure log's bucket (erasurelog.tf) is private
// (uniform access, public access prevention enforced), unversioned, keeps
// every entry by a retention policy at least a day longer than the longest
// backup a restore could start from, deletes it by a lifecycle rule once
// that retention is over, and is granted to Account, to create objects, and
// to the operators who replay it (erasure_log_operators), to read and create
// them: an entry outlives every backup that could bring its user back, and
// no longer, and nobody may replace or delete it before.
func ErasureLogRule(p *Plan, _ *Graph) []error {
	buckets := p.Instances("google_storage_bucket", "erasure_log")
	if len(buckets) != 1 {
		return []error{fmt.Errorf("erasure log rule: %d erasure log buckets planned, want 1", len(buckets))}
	}
	b := buckets[""]
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("erasure log rule: "+format, args...))
	}
	if on, _ := b.Get("uniform_bucket_level_access").(bool); !on {
		fail("%s has no uniform bucket-level access", b.Address)
	}
	if v := b.Str("public_access_prevention"); v != "enforced" {
		fail("%s has public_access_prevention %q, want enforced", b.Address, v)
	}
	if on, _ := b.Get("versioning", 0, "enabled").(bool); on {
		fail("%s is versioned: an object version outlives the entry's deletion", b.Address)
	}

	longest, what := time.Duration(0), "no backup"
	backup := func(typ, name string, path ...any) {
		for _, rc := range p.Instances(typ, name) {
			d, err := time.ParseDuration(rc.Str(path...))
			if err != nil {
				fail("%s: backup retention %q: %v", rc.Address, rc.Str(path...), err)
				continue
			}
			if d > longest {
				longest, what = d, rc.Address
			}
		}
	}
	backup("google_spanner_backup_schedule", "daily", "retention_duration")
	backup("google_firestore_backup_schedule", "daily", "retention")
	backup("google_bigtable_table", "table", "automated_backup_policy", 0, "retention_period")
	keep := time.Duration(b.Num("retention_policy", 0, "retention_period")) * time.Second
	if keep < longest+24*time.Hour {
		fail("%s keeps entries %v, want at least a day more than the longest backup (%v, %s)", b.Address, keep, longest, what)
	}
	deleteAge := -1.0
	rules, _ := b.Get("lifecycle_rule").([]any)
	for i := range rules {
		if dig(rules, i, "action", 0, "type") == "Delete" {
			if age, ok := dig(rules, i, "condition", 0, "age").(float64); ok {
				deleteAge = age
			}
		}
	}
	if days := math.Ceil(keep.Hours() / 24); deleteAge < days {
		fail("%s deletes entries at age %v days, want a Delete rule at the retention (%v days) or later", b.Address, deleteAge, days)
	}

	var grants []ResourceChange
	for _, typ := range []string{"google_storage_bucket_iam_member", "google_storage_bucket_iam_binding", "google_storage_bucket_iam_policy"} {
		for _, rc := range p.ResourceChanges {
			if rc.Mode == "managed" && rc.Type == typ && rc.Str("bucket") == b.Str("name") {
				grants = append(grants, rc)
			}
		}
	}
	writers := 0
	for _, g := range grants {
		switch {
		case g.Type != "google_storage_bucket_iam_member":
			fail("%s is a %s on the erasure log: only members are granted there, each by its role", g.Address, g.Type)
		case g.Name == "erasure_log_writer" && g.Str("role") == "roles/storage.objectCreator":
			writers++
		case g.Name == "erasure_log_operator" && operatorRoles[g.Str("role")]:
		default:
			fail("%s grants %q on the erasure log: only Account's roles/storage.objectCreator and the operators' roles/storage.objectViewer and objectCreator (erasure_log_operators) belong there", g.Address, g.Str("role"))
		}
	}
	if writers != 1 {
		fail("%d grants of roles/storage.objectCreator to Account on the erasure log, want 1", writers)
	}
	return errs
}
