package emulators

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
	pubsubadmin "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	instance "cloud.google.com/go/spanner/admin/instance/apiv1"
	"cloud.google.com/go/spanner/admin/instance/apiv1/instancepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/videngage/engagement/shared/topology"
)

// HistoryMaxAgeVar is the topology variable (topology.Family.MaxAgeDaysVar)
// that Target.HistoryMaxAgeDays overrides; config.History.MaxAgeDays
// (HISTORY_MAX_AGE_DAYS) carries the same value to the code.
const HistoryMaxAgeVar = "history_max_age_days"

// Target is where Provision creates the topology's resources.
type Target struct {
	Project          string
	SpannerInstance  string
	SpannerDatabase  string
	BigtableInstance string
	// PushEndpoint returns the URL that the push subscription of an event
	// function delivers to. Nil makes every subscription a pull subscription.
	PushEndpoint func(function string) string
	// HistoryMaxAgeDays overrides the topology default of HistoryMaxAgeVar
	// when positive.
	HistoryMaxAgeDays int
	// Buckets are the Cloud Storage buckets to create
	// (config.Config.Buckets); Teardown deletes them with their objects.
	Buckets []string
}

// Provision creates in the emulators at hosts, from shared/topology only: the
// Spanner instance and database with topology.DDL(); the Bigtable tables and
// column families with their GC policies; the Pub/Sub topics, dead-letter
// topics with their pull subscriptions, and one subscription per topic
// subscription with the topology's delivery settings (but for the retry
// backoff, which the emulator gets wrong); and the Cloud Storage buckets
// t.Buckets names. It is idempotent: what exists is kept (push endpoints and
// GC policies are updated), so the local stack can run it on every start.
//
// Firestore needs nothing: collections appear on first write.
func Provision(ctx context.Context, hosts Hosts, t Target) (err error) {
	defer wrap(&err, "emulators.Provision(%q)", t.Project)
	if err := t.validate(); err != nil {
		return err
	}
	top, err := topology.Load()
	if err != nil {
		return err
	}
	return parallel(
		func() error { return provisionSpanner(ctx, hosts.Spanner, t) },
		func() error { return provisionBigtable(ctx, hosts.Bigtable, t, top.Bigtable) },
		func() error { return provisionPubSub(ctx, hosts.PubSub, t, top.PubSub) },
		func() error { return provisionStorage(ctx, hosts.Storage, t) },
	)
}

// Teardown deletes what Provision created for t, releasing the emulators'
// memory and stopping push deliveries to endpoints that are going away.
// Missing resources are fine.
func Teardown(ctx context.Context, hosts Hosts, t Target) (err error) {
	defer wrap(&err, "emulators.Teardown(%q)", t.Project)
	if err := t.validate(); err != nil {
		return err
	}
	top, err := topology.Load()
	if err != nil {
		return err
	}
	return parallel(
		func() error { return teardownSpanner(ctx, hosts.Spanner, t) },
		func() error { return teardownBigtable(ctx, hosts.Bigtable, t, top.Bigtable) },
		func() error { return teardownPubSub(ctx, hosts.PubSub, t, top.PubSub) },
		func() error { return teardownStorage(ctx, hosts.Storage, t) },
	)
}

func (t Target) validate() error {
	if t.Project == "" || t.SpannerInstance == "" || t.SpannerDatabase == "" || t.BigtableInstance == "" {
		return fmt.Errorf("target %+v: Project, SpannerInstance, SpannerDatabase and BigtableInstance are required", t)
	}
	return nil
}

// ---- Spanner

func spannerClients(ctx context.Context, host string) (*instance.InstanceAdminClient, *database.DatabaseAdminClient, func(), error) {
	return adminClients(ctx, host, instance.NewInstanceAdminClient, database.NewDatabaseAdminClient)
}

// adminClients dials the emulator at host and opens two admin clients over
// the one connection; done closes it.
func adminClients[A, B any](ctx context.Context, host string,
	newA func(context.Context, ...option.ClientOption) (A, error),
	newB func(context.Context, ...option.ClientOption) (B, error),
) (a A, b B, done func(), err error) {
	conn, err := dial(host)
	if err != nil {
		return a, b, nil, err
	}
	if a, err = newA(ctx, connOpts(conn)...); err == nil {
		b, err = newB(ctx, connOpts(conn)...)
	}
	if err != nil {
		conn.Close()
		var za A
		var zb B
		return za, zb, nil, err
	}
	return a, b, func() { conn.Close() }, nil
}

func provisionSpanner(ctx context.Context, host string, t Target) (err error) {
	defer wrap(&err, "spanner")
	all, err := topology.DDL()
	if err != nil {
		return err
	}
	// The emulator has no database roles: it refuses their statements and
	// ignores the role a client names (docs/security.md).
	var ddl []string
	for _, s := range all {
		if !topology.AccessControl(s) {
			ddl = append(ddl, s)
		}
	}
	ia, da, done, err := spannerClients(ctx, host)
	if err != nil {
		return err
	}
	defer done()

	instName := fmt.Sprintf("projects/%s/instances/%s", t.Project, t.SpannerInstance)
	if _, err := ia.GetInstance(ctx, &instancepb.GetInstanceRequest{Name: instName}); status.Code(err) == codes.NotFound {
		op, err := ia.CreateInstance(ctx, &instancepb.CreateInstanceRequest{
			Parent:     "projects/" + t.Project,
			InstanceId: t.SpannerInstance,
			Instance: &instancepb.Instance{
				Name:        instName,
				Config:      fmt.Sprintf("projects/%s/instanceConfigs/emulator-config", t.Project),
				DisplayName: t.SpannerInstance,
				NodeCount:   1,
			},
		})
		if err == nil {
			err = waitOp(ctx, func(ctx context.Context) (bool, error) {
				_, err := op.Poll(ctx)
				return op.Done(), err
			})
		}
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("create instance %s: %w", instName, err)
		}
	} else if err != nil {
		return fmt.Errorf("get instance %s: %w", instName, err)
	}

	dbName := instName + "/databases/" + t.SpannerDatabase
	op, err := da.CreateDatabase(ctx, &databasepb.CreateDatabaseRequest{
		Parent:          instName,
		CreateStatement: "CREATE DATABASE `" + t.SpannerDatabase + "`",
		ExtraStatements: ddl,
	})
	if err == nil {
		err = waitOp(ctx, func(ctx context.Context) (bool, error) {
			_, err := op.Poll(ctx)
			return op.Done(), err
		})
	}
	switch {
	case err == nil:
		return nil
	case status.Code(err) == codes.AlreadyExists:
		return addMissingDDL(ctx, da, dbName, ddl)
	default:
		return fmt.Errorf("create database %s: %w", dbName, err)
	}
}

// addMissingDDL brings an existing database up to the topology. The DDL files
// only ever append statements (google_spanner_database.ddl applies the new
// ones to a deployed database), so walking them in order against what the
// database has tells which are still to apply: a CREATE whose object is
// absent, an ALTER TABLE … ADD COLUMN whose column is absent, a DROP whose
// object is present. Other statements cannot be told apart from ones already
// applied; against a running stack they need a restart, which starts empty.
func addMissingDDL(ctx context.Context, da *database.DatabaseAdminClient, dbName string, ddl []string) error {
	resp, err := da.GetDatabaseDdl(ctx, &databasepb.GetDatabaseDdlRequest{Database: dbName})
	if err != nil {
		return fmt.Errorf("get DDL of %s: %w", dbName, err)
	}
	have := map[string]bool{}
	for _, s := range resp.Statements {
		if k, ok := ddlObject(s); ok {
			have[k] = true
		}
		for _, c := range tableColumns(s) {
			have[c] = true
		}
	}
	var missing []string
	for _, s := range ddl {
		if k, ok := ddlObject(s); ok && !have[k] {
			missing = append(missing, s)
			have[k] = true
		} else if c, ok := addedColumn(s); ok && !have[c] {
			missing = append(missing, s)
			have[c] = true
		} else if k, ok := droppedObject(s); ok && have[k] {
			missing = append(missing, s)
			delete(have, k)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	op, err := da.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{Database: dbName, Statements: missing})
	if err == nil {
		err = waitOp(ctx, func(ctx context.Context) (bool, error) {
			err := op.Poll(ctx)
			return op.Done(), err
		})
	}
	if err != nil {
		return fmt.Errorf("update DDL of %s: %w", dbName, err)
	}
	return nil
}

var (
	addColumnRE = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+([^\s]+)\s+ADD\s+COLUMN\s+(?:IF\s+NOT\s+EXISTS\s+)?([^\s]+)`)
	dropRE      = regexp.MustCompile(`(?is)^\s*DROP\s+(TABLE|INDEX|VIEW|CHANGE\s+STREAM|SEQUENCE)\s+(?:IF\s+EXISTS\s+)?([^\s;]+)`)
	columnRE    = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*)\s+[A-Z]`)
)

// addedColumn returns "COLUMN table.column" for ALTER TABLE … ADD COLUMN.
func addedColumn(stmt string) (string, bool) {
	m := addColumnRE.FindStringSubmatch(stmt)
	if m == nil {
		return "", false
	}
	return "COLUMN " + strings.Trim(m[1], "`") + "." + strings.Trim(m[2], "`"), true
}

// droppedObject returns "KIND name" for a DROP statement, as ddlObject names
// the object that a CREATE makes.
func droppedObject(stmt string) (string, bool) {
	m := dropRE.FindStringSubmatch(stmt)
	if m == nil {
		return "", false
	}
	return strings.ToUpper(strings.Join(strings.Fields(m[1]), " ")) + " " + strings.Trim(m[2], "`"), true
}

// tableColumns returns "COLUMN table.column" for every column of a CREATE
// TABLE statement as the database lists it (one column a line, indented).
func tableColumns(stmt string) []string {
	k, ok := ddlObject(stmt)
	if !ok || !strings.HasPrefix(k, "TABLE ") {
		return nil
	}
	table := strings.TrimPrefix(k, "TABLE ")
	lines := strings.Split(stmt, "\n")
	var cols []string
	for _, line := range lines[1:] {
		if strings.HasPrefix(line, ")") { // the table's closing line; a column's OPTIONS close indented
			break
		}
		if m := columnRE.FindStringSubmatch(line); m != nil && !strings.EqualFold(m[1], "CONSTRAINT") {
			cols = append(cols, "COLUMN "+table+"."+m[1])
		}
	}
	return cols
}

var createRE = regexp.MustCompile(`(?is)^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:UNIQUE\s+)?(?:NULL_FILTERED\s+)?` +
	`(TABLE|INDEX|SEARCH\s+INDEX|VECTOR\s+INDEX|VIEW|CHANGE\s+STREAM|SEQUENCE|ROLE|MODEL|SCHEMA|PROPERTY\s+GRAPH|LOCALITY\s+GROUP|PLACEMENT)\s+` +
	`(?:IF\s+NOT\s+EXISTS\s+)?([^\s(]+)`)

// ddlObject returns "KIND name" for a CREATE statement.
func ddlObject(stmt string) (string, bool) {
	m := createRE.FindStringSubmatch(stmt)
	if m == nil {
		return "", false
	}
	kind := strings.ToUpper(strings.Join(strings.Fields(m[1]), " "))
	return kind + " " + strings.Trim(m[2], "`"), true
}

func teardownSpanner(ctx context.Context, host string, t Target) (err error) {
	defer wrap(&err, "spanner")
	ia, da, done, err := spannerClients(ctx, host)
	if err != nil {
		return err
	}
	defer done()
	instName := fmt.Sprintf("projects/%s/instances/%s", t.Project, t.SpannerInstance)
	err = da.DropDatabase(ctx, &databasepb.DropDatabaseRequest{Database: instName + "/databases/" + t.SpannerDatabase})
	if err != nil && status.Code(err) != codes.NotFound {
		return err
	}
	err = ia.DeleteInstance(ctx, &instancepb.DeleteInstanceRequest{Name: instName})
	if err != nil && status.Code(err) != codes.NotFound {
		return err
	}
	return nil
}

// ---- Bigtable

func provisionBigtable(ctx context.Context, host string, t Target, top topology.Bigtable) (err error) {
	defer wrap(&err, "bigtable")
	conn, err := dial(host)
	if err != nil {
		return err
	}
	defer conn.Close()
	ac, err := bigtable.NewAdminClient(ctx, t.Project, t.BigtableInstance, connOpts(conn)...)
	if err != nil {
		return err
	}
	var tasks []func() error
	for _, table := range top.Tables {
		families := map[string]bigtable.Family{}
		for _, f := range table.Families {
			age, err := maxAge(top, f, t)
			if err != nil {
				return fmt.Errorf("table %s: %w", table.Name, err)
			}
			families[f.Name] = bigtable.Family{GCPolicy: bigtable.MaxAgePolicy(age)}
		}
		tasks = append(tasks, func() error {
			err := ac.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: table.Name, ColumnFamilies: families})
			if status.Code(err) != codes.AlreadyExists {
				if err != nil {
					return fmt.Errorf("create table %s: %w", table.Name, err)
				}
				// The emulator starts collecting a table's garbage only
				// once a family's GC policy is modified, not when the table
				// is created with one: set each policy again (a no-op in
				// the cloud).
				for name, fam := range families {
					if err := ac.SetGCPolicy(ctx, table.Name, name, fam.GCPolicy); err != nil {
						return fmt.Errorf("table %s family %s: %w", table.Name, name, err)
					}
				}
				return nil
			}
			for name, fam := range families {
				err := ac.CreateColumnFamilyWithConfig(ctx, table.Name, name, fam)
				if status.Code(err) == codes.AlreadyExists {
					err = ac.SetGCPolicy(ctx, table.Name, name, fam.GCPolicy)
				}
				if err != nil {
					return fmt.Errorf("table %s family %s: %w", table.Name, name, err)
				}
			}
			return nil
		})
	}
	return parallel(tasks...)
}

// maxAge is the GC max age of a family: its fixed age, else the target's
// override of its variable, else the topology default of its variable.
func maxAge(top topology.Bigtable, f topology.Family, t Target) (time.Duration, error) {
	age, fixed, err := f.FixedMaxAge()
	if err != nil || fixed {
		return age, err
	}
	if f.MaxAgeDaysVar == HistoryMaxAgeVar && t.HistoryMaxAgeDays > 0 {
		return time.Duration(t.HistoryMaxAgeDays) * 24 * time.Hour, nil
	}
	days, ok := top.Defaults[f.MaxAgeDaysVar]
	if !ok || days <= 0 {
		return 0, fmt.Errorf("family %s: no positive default for %q in topology bigtable.defaults", f.Name, f.MaxAgeDaysVar)
	}
	return time.Duration(days) * 24 * time.Hour, nil
}

func teardownBigtable(ctx context.Context, host string, t Target, top topology.Bigtable) (err error) {
	defer wrap(&err, "bigtable")
	conn, err := dial(host)
	if err != nil {
		return err
	}
	defer conn.Close()
	ac, err := bigtable.NewAdminClient(ctx, t.Project, t.BigtableInstance, connOpts(conn)...)
	if err != nil {
		return err
	}
	var errs []error
	for _, table := range top.Tables {
		if err := ac.DeleteTable(ctx, table.Name); err != nil && status.Code(err) != codes.NotFound {
			errs = append(errs, fmt.Errorf("delete table %s: %w", table.Name, err))
		}
	}
	return errors.Join(errs...)
}

// ---- Pub/Sub

func pubsubClients(ctx context.Context, host string) (*pubsubadmin.TopicAdminClient, *pubsubadmin.SubscriptionAdminClient, func(), error) {
	return adminClients(ctx, host, pubsubadmin.NewTopicAdminClient, pubsubadmin.NewSubscriptionAdminClient)
}

// TopicName and SubscriptionName are the full Pub/Sub resource names.
func TopicName(project, topic string) string { return "projects/" + project + "/topics/" + topic }
func SubscriptionName(project, sub string) string {
	return "projects/" + project + "/subscriptions/" + sub
}

func provisionPubSub(ctx context.Context, host string, t Target, top topology.PubSub) (err error) {
	defer wrap(&err, "pubsub")
	tc, sc, done, err := pubsubClients(ctx, host)
	if err != nil {
		return err
	}
	defer done()
	d := top.Delivery
	retention := durationpb.New(time.Duration(d.MessageRetentionSeconds) * time.Second)

	createTopic := func(name string) error {
		_, err := tc.CreateTopic(ctx, &pubsubpb.Topic{Name: TopicName(t.Project, name)})
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
		return nil
	}
	createSub := func(s *pubsubpb.Subscription) error {
		_, err := sc.CreateSubscription(ctx, s)
		if status.Code(err) == codes.AlreadyExists {
			// Keep the existing subscription and its messages; point it at
			// the endpoint of this run.
			err = sc.ModifyPushConfig(ctx, &pubsubpb.ModifyPushConfigRequest{Subscription: s.Name, PushConfig: s.PushConfig})
		}
		if err != nil {
			return fmt.Errorf("create subscription %s: %w", s.Name, err)
		}
		return nil
	}

	var tasks []func() error
	for _, topic := range top.Topics {
		tasks = append(tasks, func() error {
			// The dead-letter topic and its subscription first, so that the
			// policy of a subscription never names a missing topic and
			// nothing dead-lettered is dropped.
			if err := parallel(
				func() error { return createTopic(topic.Name) },
				func() error { return createTopic(topic.DeadLetterTopic) },
			); err != nil {
				return err
			}
			subs := []func() error{func() error {
				return createSub(&pubsubpb.Subscription{
					Name:                     SubscriptionName(t.Project, top.DeadLetterSubscription(topic.DeadLetterTopic)),
					Topic:                    TopicName(t.Project, topic.DeadLetterTopic),
					AckDeadlineSeconds:       int32(d.AckDeadlineSeconds),
					MessageRetentionDuration: retention,
					PushConfig:               &pubsubpb.PushConfig{},
				})
			}}
			for _, s := range topic.Subscriptions {
				push := &pubsubpb.PushConfig{}
				if t.PushEndpoint != nil {
					push.PushEndpoint = t.PushEndpoint(s.Function)
				}
				subs = append(subs, func() error {
					return createSub(&pubsubpb.Subscription{
						Name:                     SubscriptionName(t.Project, s.Name),
						Topic:                    TopicName(t.Project, topic.Name),
						PushConfig:               push,
						AckDeadlineSeconds:       int32(s.AckDeadline(d)),
						MessageRetentionDuration: retention,
						// No retry policy (the topology's backoff is set in the
						// cloud by Terraform): the emulator's exponential
						// backoff strands messages. When a burst of pushes is
						// refused together (an event function down for a few
						// seconds), most of those messages are never pushed
						// again after their third attempt, while a lone
						// refused message is retried as configured. Without
						// a policy the emulator retries about every second
						// and dead-letters after MaxDeliveryAttempts.
						DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{
							DeadLetterTopic:     TopicName(t.Project, topic.DeadLetterTopic),
							MaxDeliveryAttempts: int32(d.MaxDeliveryAttempts),
						},
					})
				})
			}
			return parallel(subs...)
		})
	}
	return parallel(tasks...)
}

// SetPushEndpoint points a subscription of project at endpoint (a URL), or
// makes it a pull subscription when endpoint is empty. Tests use it to
// receive a subscription's deliveries on their own server.
func SetPushEndpoint(ctx context.Context, hosts Hosts, project, subscription, endpoint string) (err error) {
	defer wrap(&err, "emulators.SetPushEndpoint(%q, %q)", subscription, endpoint)
	_, sc, done, err := pubsubClients(ctx, hosts.PubSub)
	if err != nil {
		return err
	}
	defer done()
	return sc.ModifyPushConfig(ctx, &pubsubpb.ModifyPushConfigRequest{
		Subscription: SubscriptionName(project, subscription),
		PushConfig:   &pubsubpb.PushConfig{PushEndpoint: endpoint},
	})
}

func teardownPubSub(ctx context.Context, host string, t Target, top topology.PubSub) (err error) {
	defer wrap(&err, "pubsub")
	tc, sc, done, err := pubsubClients(ctx, host)
	if err != nil {
		return err
	}
	defer done()
	var subs, topics []string
	for _, topic := range top.Topics {
		topics = append(topics, topic.Name, topic.DeadLetterTopic)
		subs = append(subs, top.DeadLetterSubscription(topic.DeadLetterTopic))
		for _, s := range topic.Subscriptions {
			subs = append(subs, s.Name)
		}
	}
	var tasks []func() error
	for _, s := range subs {
		tasks = append(tasks, func() error {
			err := sc.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: SubscriptionName(t.Project, s)})
			if err != nil && status.Code(err) != codes.NotFound {
				return fmt.Errorf("delete subscription %s: %w", s, err)
			}
			return nil
		})
	}
	if err := parallel(tasks...); err != nil {
		return err
	}
	tasks = nil
	for _, name := range topics {
		tasks = append(tasks, func() error {
			err := tc.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: TopicName(t.Project, name)})
			if err != nil && status.Code(err) != codes.NotFound {
				return fmt.Errorf("delete topic %s: %w", name, err)
			}
			return nil
		})
	}
	return parallel(tasks...)
}

// ---- helpers

func dial(host string) (*grpc.ClientConn, error) {
	if host == "" {
		return nil, errors.New("no emulator host")
	}
	return grpc.NewClient(host, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func connOpts(conn *grpc.ClientConn) []option.ClientOption {
	return []option.ClientOption{option.WithGRPCConn(conn), option.WithoutAuthentication()}
}

// waitOp polls a long-running operation until it is done. The emulators
// finish operations at once, so the client libraries' one-second first
// back-off would only add latency.
func waitOp(ctx context.Context, poll func(context.Context) (bool, error)) error {
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		done, err := poll(ctx)
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// parallel runs fns concurrently and joins their errors.
func parallel(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func wrap(errp *error, format string, args ...any) {
	if *errp != nil {
		*errp = fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), *errp)
	}
}
