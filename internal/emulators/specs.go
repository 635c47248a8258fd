package emulators

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	btapb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/firestore/apiv1/firestorepb"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/spanner/admin/instance/apiv1/instancepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// probeProject is a project id used only by readiness probes.
const probeProject = "emulator-probe"

func spannerSpec(root string, grpcPort, httpPort int) emulatorSpec {
	gateway := binaryPath(root, Spanner)
	return emulatorSpec{
		name:  Spanner,
		ports: []int{grpcPort, httpPort},
		args: func(p []int) []string {
			return []string{gateway,
				"--hostname=127.0.0.1",
				"--grpc_port=" + strconv.Itoa(p[0]),
				"--http_port=" + strconv.Itoa(p[1]),
				"--grpc_binary=" + filepath.Join(filepath.Dir(gateway), "emulator_main"),
				// Every test creates its own database; the default cap of 100
				// per instance is for production. Tests use one instance per
				// project anyway, so this only matters for a long make run.
				"--override_max_databases_per_instance=10000",
			}
		},
		probe: probeSpanner,
	}
}

func bigtableSpec(root string, port int) emulatorSpec {
	bin := binaryPath(root, Bigtable)
	return emulatorSpec{
		name:  Bigtable,
		ports: []int{port},
		args: func(p []int) []string {
			return []string{bin, "-host=127.0.0.1", "-port=" + strconv.Itoa(p[0])}
		},
		probe: probeBigtable,
	}
}

func pubsubSpec(root string, port int) emulatorSpec {
	bin := binaryPath(root, PubSub)
	return emulatorSpec{
		name:  PubSub,
		ports: []int{port},
		args: func(p []int) []string {
			return []string{bin, "--host=127.0.0.1", "--port=" + strconv.Itoa(p[0])}
		},
		probe: probePubSub,
	}
}

func firestoreSpec(root string, port int) emulatorSpec {
	bin := binaryPath(root, Firestore)
	return emulatorSpec{
		name:  Firestore,
		ports: []int{port},
		args: func(p []int) []string {
			return []string{bin, "start", "--host=127.0.0.1", "--port=" + strconv.Itoa(p[0])}
		},
		probe: probeFirestore,
	}
}

// grpcProbe makes a probe that sends one real RPC over a fresh connection.
func grpcProbe(call func(context.Context, *grpc.ClientConn) error) func(context.Context, string) error {
	return func(ctx context.Context, host string) error {
		c, err := grpc.NewClient(host, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer c.Close()
		return call(ctx, c)
	}
}

// Probes: one real request each, answered only by a working emulator.
var (
	probeSpanner = grpcProbe(func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := instancepb.NewInstanceAdminClient(c).ListInstanceConfigs(ctx,
			&instancepb.ListInstanceConfigsRequest{Parent: "projects/" + probeProject})
		return err
	})
	probeBigtable = grpcProbe(func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := btapb.NewBigtableTableAdminClient(c).ListTables(ctx,
			&btapb.ListTablesRequest{Parent: "projects/" + probeProject + "/instances/probe"})
		return err
	})
	probePubSub = grpcProbe(func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := pubsubpb.NewPublisherClient(c).ListTopics(ctx,
			&pubsubpb.ListTopicsRequest{Project: "projects/" + probeProject})
		return err
	})
)

// probeFirestore reads a document that does not exist: only Firestore
// answers NOT_FOUND (another emulator that took the port answers
// UNIMPLEMENTED, which a bare HTTP probe could not tell apart).
var probeFirestore = grpcProbe(func(ctx context.Context, c *grpc.ClientConn) error {
	_, err := firestorepb.NewFirestoreClient(c).GetDocument(ctx, &firestorepb.GetDocumentRequest{
		Name: "projects/" + probeProject + "/databases/(default)/documents/probe/probe",
	})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err == nil {
		return fmt.Errorf("firestore probe: a document that cannot exist was found")
	}
	return err
})

// Ping sends each emulator of the stack one real request and reports the
// ones that do not answer.
func (s *Stack) Ping(ctx context.Context) error {
	checks := []struct {
		name, env, host string
		probe           func(context.Context, string) error
	}{
		{Spanner, EnvSpanner, s.Hosts.Spanner, probeSpanner},
		{Bigtable, EnvBigtable, s.Hosts.Bigtable, probeBigtable},
		{PubSub, EnvPubSub, s.Hosts.PubSub, probePubSub},
		{Firestore, EnvFirestore, s.Hosts.Firestore, probeFirestore},
		{Storage, EnvStorage, s.Hosts.Storage, probeStorage},
	}
	var fns []func() error
	for _, c := range checks {
		fns = append(fns, func() error {
			if err := c.probe(ctx, c.host); err != nil {
				return fmt.Errorf("%s emulator at %s (%s) does not answer: %w", c.name, c.host, c.env, err)
			}
			return nil
		})
	}
	return parallel(fns...)
}
