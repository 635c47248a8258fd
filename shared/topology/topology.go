// Package topology holds the names of every Google Cloud resource the system
// uses. The same topology.json and ddl/*.sql files are read by the Go code, by
// the local stack that provisions the emulators, and by Terraform, so the three
// can never disagree about a topic, a table or a column family.
package topology

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"
)

//go:embed topology.json ddl/*.sql
var files embed.FS

// Topology is the decoded topology.json.
type Topology struct {
	Spanner   Spanner     `json:"spanner"`
	Bigtable  Bigtable    `json:"bigtable"`
	Firestore Firestore   `json:"firestore"`
	PubSub    PubSub      `json:"pubsub"`
	Functions []Function  `json:"functions"`
	Scheduler []Scheduled `json:"scheduler"`
}

type Spanner struct {
	Instance string `json:"instance"`
	Database string `json:"database"`
	DDLDir   string `json:"ddlDir"`
}

type Bigtable struct {
	Instance string           `json:"instance"`
	Tables   []Table          `json:"tables"`
	Defaults map[string]int64 `json:"defaults"`
}

type Table struct {
	Name     string   `json:"name"`
	Families []Family `json:"families"`
}

// Family is a column family. Its GC policy is a maximum age: either in days,
// taken from the variable MaxAgeDaysVar names (a Terraform variable in the
// cloud, an environment override locally) with the default in
// Bigtable.Defaults, or fixed by MaxAge (a Go duration such as "1h").
type Family struct {
	Name          string `json:"name"`
	MaxAgeDaysVar string `json:"maxAgeDaysVar,omitempty"`
	MaxAge        string `json:"maxAge,omitempty"`
}

// FixedMaxAge is the family's fixed GC max age; ok is false for a family whose
// age is a variable's. Exactly one of MaxAge and MaxAgeDaysVar must be set.
func (f Family) FixedMaxAge() (age time.Duration, ok bool, err error) {
	switch {
	case f.MaxAge != "" && f.MaxAgeDaysVar != "":
		return 0, false, fmt.Errorf("family %s: both maxAge and maxAgeDaysVar", f.Name)
	case f.MaxAge == "" && f.MaxAgeDaysVar == "":
		return 0, false, fmt.Errorf("family %s: neither maxAge nor maxAgeDaysVar", f.Name)
	case f.MaxAgeDaysVar != "":
		return 0, false, nil
	}
	age, err = time.ParseDuration(f.MaxAge)
	if err != nil || age <= 0 {
		return 0, false, fmt.Errorf("family %s: maxAge %q is not a positive duration", f.Name, f.MaxAge)
	}
	return age, true, nil
}

type Firestore struct {
	Collections map[string]string `json:"collections"`
}

type PubSub struct {
	Topics                       []Topic  `json:"topics"`
	DeadLetterSubscriptionSuffix string   `json:"deadLetterSubscriptionSuffix"`
	Delivery                     Delivery `json:"delivery"`
}

type Topic struct {
	Name            string         `json:"name"`
	DeadLetterTopic string         `json:"deadLetterTopic"`
	Subscriptions   []Subscription `json:"subscriptions"`
}

// Subscription is a push subscription delivering to an event function.
type Subscription struct {
	Name     string `json:"name"`
	Function string `json:"function"`
	// AckDeadlineSeconds, when set, is this subscription's ack deadline in
	// place of Delivery's: for a function whose delivery may take longer.
	AckDeadlineSeconds int `json:"ackDeadlineSeconds,omitempty"`
}

// AckDeadline is the subscription's ack deadline in seconds under d.
func (s Subscription) AckDeadline(d Delivery) int {
	if s.AckDeadlineSeconds > 0 {
		return s.AckDeadlineSeconds
	}
	return d.AckDeadlineSeconds
}

type Delivery struct {
	AckDeadlineSeconds      int `json:"ackDeadlineSeconds"`
	MaxDeliveryAttempts     int `json:"maxDeliveryAttempts"`
	MinimumBackoffSeconds   int `json:"minimumBackoffSeconds"`
	MaximumBackoffSeconds   int `json:"maximumBackoffSeconds"`
	MessageRetentionSeconds int `json:"messageRetentionSeconds"`
}

// Function kinds.
const (
	KindHTTP      = "http"      // public API, behind the gateway
	KindScheduled = "scheduled" // HTTP, called by Cloud Scheduler with OIDC
	KindEvent     = "event"     // HTTP, called by a Pub/Sub push subscription with OIDC
)

type Function struct {
	Name   string   `json:"name"`
	Kind   string   `json:"kind"`
	Public bool     `json:"public"`
	Routes []string `json:"routes"`
	// CDNRoutes are the routes among Routes whose answers are the same for
	// every caller and are served through Cloud CDN (a backend of their own,
	// with caching on); the other routes' backend never caches.
	CDNRoutes []string `json:"cdnRoutes,omitempty"`
}

// Scheduled is a Cloud Scheduler job calling a scheduled function.
type Scheduled struct {
	Name     string         `json:"name"`
	Function string         `json:"function"`
	Schedule string         `json:"schedule"`
	Body     map[string]any `json:"body"`
	// FanOut: Terraform deploys the job as several, <name>-<k>, as many as
	// its scheduler_fan_out gives the environment (the local stack runs
	// one); their invocations share the job's work under its leases.
	FanOut bool `json:"fanOut,omitempty"`
}

// Job is the entry a deployed Cloud Scheduler job stands for: the one of
// its name, or the fanOut entry of which it is a copy, <name>-<k>.
func (t *Topology) Job(deployed string) (Scheduled, bool) {
	for _, j := range t.Scheduler {
		if j.Name == deployed {
			return j, true
		}
	}
	for _, j := range t.Scheduler {
		if k, ok := strings.CutPrefix(deployed, j.Name+"-"); ok && j.FanOut {
			if n, err := strconv.Atoi(k); err == nil && n >= 0 && strconv.Itoa(n) == k {
				return j, true
			}
		}
	}
	return Scheduled{}, false
}

// Load decodes the embedded topology.
func Load() (*Topology, error) {
	b, err := files.ReadFile("topology.json")
	if err != nil {
		return nil, fmt.Errorf("topology.Load: %w", err)
	}
	var t Topology
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("topology.Load: %w", err)
	}
	for _, tb := range t.Bigtable.Tables {
		for _, f := range tb.Families {
			if _, _, err := f.FixedMaxAge(); err != nil {
				return nil, fmt.Errorf("topology.Load: table %s: %w", tb.Name, err)
			}
		}
	}
	return &t, nil
}

// MustLoad is Load for program start-up and tests; the file is embedded, so
// a failure is a build defect.
func MustLoad() *Topology {
	t, err := Load()
	if err != nil {
		panic(err)
	}
	return t
}

// DDL returns the Spanner DDL statements of every ddl/*.sql file, in file name
// order, split on ';'. Terraform splits the same files the same way.
func DDL() ([]string, error) {
	dir, err := fs.Sub(files, "ddl")
	if err != nil {
		return nil, err
	}
	stmts, err := ReadDDL(dir)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(stmts))
	for i, s := range stmts {
		out[i] = s.SQL
	}
	return out, nil
}

// AccessControl says whether a DDL statement is one of fine-grained access
// control (CREATE ROLE, DROP ROLE, GRANT, REVOKE): Spanner applies them, the
// emulator refuses them ("Unsupported ddl statement"), and it ignores the
// database role a client names, so the local stack leaves them out.
func AccessControl(stmt string) bool {
	f := strings.Fields(strings.ToUpper(stmt))
	if len(f) < 2 {
		return false
	}
	return f[0] == "GRANT" || f[0] == "REVOKE" || (f[0] == "CREATE" || f[0] == "DROP") && f[1] == "ROLE"
}

// SplitDDL splits a file of DDL statements on ';', dropping '--' comment lines
// and empty statements.
func SplitDDL(src string) []string {
	var kept []string
	for _, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		kept = append(kept, line)
	}
	var stmts []string
	for _, s := range strings.Split(strings.Join(kept, "\n"), ";") {
		if s = strings.TrimSpace(s); s != "" {
			stmts = append(stmts, s)
		}
	}
	return stmts
}

// Function returns the function of that name.
func (t *Topology) Function(name string) (Function, bool) {
	for _, f := range t.Functions {
		if f.Name == name {
			return f, true
		}
	}
	return Function{}, false
}

// DeadLetterSubscription names the pull subscription kept on a dead-letter
// topic so that nothing dead-lettered is lost silently.
func (p PubSub) DeadLetterSubscription(deadLetterTopic string) string {
	return deadLetterTopic + p.DeadLetterSubscriptionSuffix
}
