package emulators

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	"cloud.google.com/go/spanner/admin/instance/apiv1/instancepb"
	"cloud.google.com/go/storage"

	"github.com/videngage/engagement/shared/topology"
)

// envHold makes the test binary a helper that starts a stack, prints its
// process groups and waits to be killed (TestKill9LeavesNothing).
const envHold = "EMULATORS_TEST_HOLD_STACK"

func TestMain(m *testing.M) {
	if os.Getenv(envHold) != "" {
		s, err := Start(context.Background(), Options{})
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		fmt.Println("READY", strings.Trim(fmt.Sprint(s.ProcessGroups()), "[]"))
		select {}
	}
	os.Exit(m.Run())
}

// living returns the processes of group pgid that are still running (not
// zombies), as "pid comm".
func living(t *testing.T, pgid int) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid pgrp ...
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g == pgid {
			found = append(found, strings.TrimSpace(string(b[:i+1])))
		}
	}
	return found
}

// waitGone waits until no process of the groups is alive.
func waitGone(t *testing.T, pgids []int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		var left []string
		for _, g := range pgids {
			left = append(left, living(t, g)...)
		}
		if len(left) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("still running %v after %v: %v", pgids, within, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func dialable(host string) bool {
	c, err := net.DialTimeout("tcp", host, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func TestStartProvisionStop(t *testing.T) {
	started := time.Now()
	s, err := Start(t.Context(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Start: %v", time.Since(started))
	stopped := false
	defer func() {
		if !stopped {
			s.Stop()
		}
	}()

	env := s.Env()
	for name, host := range map[string]string{EnvSpanner: s.Hosts.Spanner, EnvBigtable: s.Hosts.Bigtable, EnvPubSub: s.Hosts.PubSub, EnvFirestore: s.Hosts.Firestore, EnvStorage: s.Hosts.Storage} {
		if !strings.HasPrefix(host, "127.0.0.1:") || env[name] != host {
			t.Errorf("%s = %q, host %q; want the loopback host", name, env[name], host)
		}
		if !dialable(host) {
			t.Errorf("%s: nothing listens on %s", name, host)
		}
	}
	groups := s.ProcessGroups()
	if len(groups) != 4 {
		t.Fatalf("process groups %v, want 4", groups)
	}
	for _, g := range groups {
		if g == syscall.Getpgrp() {
			t.Errorf("an emulator runs in the test's own process group %d", g)
		}
		if len(living(t, g)) < 2 {
			t.Errorf("group %d holds %v, want the watchdog and the emulator", g, living(t, g))
		}
	}

	t.Run("provision again", func(t *testing.T) { testProvisionAgain(t, s.Hosts) })

	top := topology.MustLoad()
	target := Target{Project: "lifecycle", SpannerInstance: top.Spanner.Instance, SpannerDatabase: top.Spanner.Database, BigtableInstance: top.Bigtable.Instance,
		Buckets: []string{"lifecycle-exports"}}
	if err := Provision(t.Context(), s.Hosts, target); err != nil {
		t.Fatal(err)
	}
	gcs, err := storageClient(t.Context(), s.Hosts.Storage)
	if err != nil {
		t.Fatal(err)
	}
	defer gcs.Close()
	w := gcs.Bucket("lifecycle-exports").Object("o").NewWriter(t.Context())
	if _, err := w.Write([]byte("x")); err != nil || w.Close() != nil {
		t.Fatalf("write to a provisioned bucket: %v", err)
	}
	if err := Provision(t.Context(), s.Hosts, target); err != nil {
		t.Fatalf("Provision of a world that exists: %v", err)
	}
	if err := Teardown(t.Context(), s.Hosts, target); err != nil {
		t.Fatal(err)
	}
	if _, err := gcs.Bucket("lifecycle-exports").Attrs(t.Context()); !errors.Is(err, storage.ErrBucketNotExist) {
		t.Errorf("the bucket with an object is still there after Teardown: %v", err)
	}
	if err := Teardown(t.Context(), s.Hosts, target); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}

	start := time.Now()
	s.Stop()
	stopped = true
	t.Logf("Stop: %v", time.Since(start))
	waitGone(t, groups, time.Second) // Stop waits: nothing may be left
	if left := owned(t, os.Getpid()); len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
	for _, h := range []string{s.Hosts.Spanner, s.Hosts.Bigtable, s.Hosts.PubSub, s.Hosts.Firestore, s.Hosts.Storage} {
		if dialable(h) {
			t.Errorf("%s still answers after Stop", h)
		}
	}
	s.Stop() // a second Stop is harmless
}

// testProvisionAgain runs Provision on a world that exists already, as the
// local stack does on every start against a running stack: it must succeed,
// add the DDL that appeared since, and apply the new GC age and push endpoint.
func testProvisionAgain(t *testing.T, hosts Hosts) {
	ctx := t.Context()
	top := topology.MustLoad()
	target := Target{Project: "again", SpannerInstance: top.Spanner.Instance, SpannerDatabase: top.Spanner.Database, BigtableInstance: top.Bigtable.Instance,
		PushEndpoint: func(fn string) string { return "http://127.0.0.1:1/old/" + fn }}
	ddl, err := topology.DDL()
	if err != nil {
		t.Fatal(err)
	}
	if len(ddl) < 2 {
		t.Fatalf("topology has %d DDL statements; this test needs two or more", len(ddl))
	}
	// An older world: the database has only the first statement.
	ia, da, done, err := spannerClients(ctx, hosts.Spanner)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	instName := "projects/again/instances/" + target.SpannerInstance
	iop, err := ia.CreateInstance(ctx, &instancepb.CreateInstanceRequest{Parent: "projects/again", InstanceId: target.SpannerInstance,
		Instance: &instancepb.Instance{Config: "projects/again/instanceConfigs/emulator-config", DisplayName: "again", NodeCount: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := iop.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	dop, err := da.CreateDatabase(ctx, &databasepb.CreateDatabaseRequest{Parent: instName,
		CreateStatement: "CREATE DATABASE `" + target.SpannerDatabase + "`", ExtraStatements: ddl[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dop.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	if err := Provision(ctx, hosts, target); err != nil {
		t.Fatalf("Provision over an older world: %v", err)
	}
	target.HistoryMaxAgeDays = 5
	target.PushEndpoint = func(fn string) string { return "http://127.0.0.1:1/new/" + fn }
	if err := Provision(ctx, hosts, target); err != nil {
		t.Fatalf("Provision again: %v", err)
	}
	defer Teardown(context.Background(), hosts, target)

	resp, err := da.GetDatabaseDdl(ctx, &databasepb.GetDatabaseDdlRequest{Database: instName + "/databases/" + target.SpannerDatabase})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, st := range resp.Statements {
		if k, ok := ddlObject(st); ok {
			have[k] = true
		}
		for _, c := range tableColumns(st) {
			have[c] = true
		}
	}
	// What the files add up to, in order: created objects and added columns
	// are there, dropped objects are not; database roles and their grants
	// are left out (the emulator has none).
	want := map[string]bool{}
	for _, st := range ddl {
		if topology.AccessControl(st) {
			continue
		}
		if k, ok := ddlObject(st); ok {
			want[k] = true
		} else if c, ok := addedColumn(st); ok {
			want[c] = true
		} else if k, ok := droppedObject(st); ok {
			want[k] = false
		}
	}
	for k, present := range want {
		if have[k] != present {
			t.Errorf("after Provision the database has %s: %v, want %v", k, have[k], present)
		}
	}

	conn, err := dial(hosts.Bigtable)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ac, err := bigtable.NewAdminClient(ctx, target.Project, target.BigtableInstance, connOpts(conn)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range top.Bigtable.Tables {
		info, err := ac.TableInfo(ctx, table.Name)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for _, f := range table.Families {
			// The history override applies to the history families only;
			// a fixed age stays what topology.json says.
			age := 5 * 24 * time.Hour
			if f.MaxAgeDaysVar != HistoryMaxAgeVar {
				fixed, ok, err := f.FixedMaxAge()
				if err != nil || !ok {
					t.Fatalf("table %s family %s: %v (fixed %v)", table.Name, f.Name, err, ok)
				}
				age = fixed
			}
			want[f.Name] = bigtable.MaxAgePolicy(age).String()
		}
		if len(info.FamilyInfos) != len(want) {
			t.Errorf("table %s has %d families, topology.json %d", table.Name, len(info.FamilyInfos), len(want))
		}
		for _, f := range info.FamilyInfos {
			if f.GCPolicy != want[f.Name] {
				t.Errorf("table %s family %s: GC policy %q after Provision with 5 days of history, want %q", table.Name, f.Name, f.GCPolicy, want[f.Name])
			}
		}
	}

	_, sc, pdone, err := pubsubClients(ctx, hosts.PubSub)
	if err != nil {
		t.Fatal(err)
	}
	defer pdone()
	for _, topic := range top.PubSub.Topics {
		for _, sub := range topic.Subscriptions {
			got, err := sc.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: SubscriptionName(target.Project, sub.Name)})
			if err != nil {
				t.Fatal(err)
			}
			if want := target.PushEndpoint(sub.Function); got.GetPushConfig().GetPushEndpoint() != want {
				t.Errorf("subscription %s pushes to %q, want %q", sub.Name, got.GetPushConfig().GetPushEndpoint(), want)
			}
		}
	}
}

func TestKill9LeavesNothing(t *testing.T) {
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), envHold+"=1")
	helper.Stderr = os.Stderr
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })

	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		t.Fatalf("helper said nothing: %v", lines.Err())
	}
	line := lines.Text()
	if !strings.HasPrefix(line, "READY ") {
		t.Fatalf("helper: %s", line)
	}
	var groups []int
	for _, f := range strings.Fields(strings.TrimPrefix(line, "READY ")) {
		g, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		groups = append(groups, g)
	}
	if len(groups) != 4 {
		t.Fatalf("helper reported groups %v, want 4", groups)
	}
	for _, g := range groups {
		if len(living(t, g)) < 2 {
			t.Fatalf("group %d holds %v before the kill", g, living(t, g))
		}
	}

	procs := owned(t, helper.Process.Pid)
	for _, want := range []string{"(java)", "(emulator_main)", "(gateway_main)", "(cbtemulator)"} {
		if !strings.Contains(strings.Join(procs, " "), want) {
			t.Fatalf("no %s among the helper's processes %v", want, procs)
		}
	}
	t.Logf("helper's processes before kill -9: %v", procs)
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	took := waitGone(t, groups, stopGrace+5*time.Second)
	if left := owned(t, helper.Process.Pid); len(left) > 0 {
		t.Errorf("processes started by the killed helper still run: %v", left)
	}
	t.Logf("every emulator process gone %v after kill -9 of its parent", took)
}

func TestStartFailsClearly(t *testing.T) {
	t.Run("no SDK", func(t *testing.T) {
		root := t.TempDir()
		t.Setenv("CLOUDSDK_ROOT", root)
		_, err := SDKRoot()
		if err == nil {
			t.Fatal("SDKRoot succeeded on an empty root")
		}
		for _, want := range []string{
			filepath.Join(root, "bin/cloud_spanner_emulator/gateway_main"), "google-cloud-cli-spanner-emulator",
			"google-cloud-cli-bigtable-emulator", "google-cloud-cli-pubsub-emulator", "google-cloud-cli-firestore-emulator",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not name %q: %v", want, err)
			}
		}
		if _, err := Start(t.Context(), Options{}); err == nil || !strings.Contains(err.Error(), "google-cloud-cli-spanner-emulator") {
			t.Errorf("Start without emulators: %v", err)
		}
	})

	t.Run("port taken", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		start := time.Now()
		_, err = Start(t.Context(), Options{BigtablePort: port, StartTimeout: 60 * time.Second})
		if err == nil {
			t.Fatal("Start succeeded on a taken port")
		}
		t.Logf("failed after %v: %v", time.Since(start), err)
		if !strings.Contains(err.Error(), "bigtable emulator exited") || !strings.Contains(err.Error(), strconv.Itoa(port)) {
			t.Errorf("error does not say the bigtable emulator could not bind port %d: %v", port, err)
		}
		if left := owned(t, os.Getpid()); len(left) > 0 {
			t.Errorf("processes left after the failed Start: %v", left)
		}
	})

	t.Run("storage port taken", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		_, err = Start(t.Context(), Options{StoragePort: port})
		if err == nil || !strings.Contains(err.Error(), "storage emulator") || !strings.Contains(err.Error(), strconv.Itoa(port)) {
			t.Errorf("Start on a taken storage port: %v; want an error naming the storage emulator and port %d", err, port)
		}
		if left := owned(t, os.Getpid()); len(left) > 0 {
			t.Errorf("processes left after the failed Start: %v", left)
		}
	})
}

// owned lists the living processes whose environment says that process
// owner started them (EnvOwner), grandchildren included.
func owned(t *testing.T, owner int) []string {
	t.Helper()
	environs, _ := filepath.Glob("/proc/[0-9]*/environ")
	marker := []byte(EnvOwner + "=" + strconv.Itoa(owner) + "\x00")
	var found []string
	for _, f := range environs {
		env, err := os.ReadFile(f)
		if err != nil || !bytes.Contains(env, marker) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(f), "stat"))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		if fields := strings.Fields(string(stat[i+1:])); len(fields) > 0 && fields[0] != "Z" {
			found = append(found, strings.TrimSpace(string(stat[:i+1])))
		}
	}
	return found
}

func TestDDLObject(t *testing.T) {
	for _, tc := range []struct {
		stmt, want string
		ok         bool
	}{
		{"CREATE TABLE AppliedEvents (\n EventId STRING(128)) PRIMARY KEY (EventId)", "TABLE AppliedEvents", true},
		{"create table `Order`(Id INT64) PRIMARY KEY (Id)", "TABLE Order", true},
		{"CREATE UNIQUE NULL_FILTERED INDEX ByUser ON Reactions(UserId)", "INDEX ByUser", true},
		{"CREATE INDEX IF NOT EXISTS ByVideo ON Comments(VideoId)", "INDEX ByVideo", true},
		{"CREATE OR REPLACE VIEW Visible SQL SECURITY INVOKER AS SELECT 1", "VIEW Visible", true},
		{"CREATE CHANGE STREAM  Everything FOR ALL", "CHANGE STREAM Everything", true},
		{"CREATE SEQUENCE Ids OPTIONS (sequence_kind='bit_reversed_positive')", "SEQUENCE Ids", true},
		{"ALTER TABLE Comments ADD COLUMN Spam BOOL", "", false},
	} {
		got, ok := ddlObject(tc.stmt)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ddlObject(%q) = %q, %v; want %q, %v", tc.stmt, got, ok, tc.want, tc.ok)
		}
	}
}

func TestPrefixWriterAndTail(t *testing.T) {
	var buf bytes.Buffer
	var tl tail
	tl.max = 8
	w := &prefixWriter{mu: new(sync.Mutex), w: &buf, prefix: []byte("[x] ")}
	for _, chunk := range []string{"one\ntw", "o\n", "three"} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
		tl.Write([]byte(chunk))
	}
	if got, want := buf.String(), "[x] one\n[x] two\n"; got != want {
		t.Errorf("prefixed output %q, want %q", got, want)
	}
	if got, want := tl.String(), "wo\nthree"; got != want {
		t.Errorf("tail %q, want %q", got, want)
	}
}
