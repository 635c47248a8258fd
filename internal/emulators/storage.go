package emulators

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	"cloud.google.com/go/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
)

// The Cloud Storage emulator is fake-gcs-server, a Go library: it runs in the
// process that starts the stack (and so dies with it), on a loopback port of
// its own, and serves the JSON API the client library speaks and the
// path-style object URLs (http://host/bucket/object) that signed URLs name.

// startStorage starts the Cloud Storage emulator on port (0 picks a free
// one), retrying on new ports when another process takes a picked one first.
func startStorage(port int, out io.Writer) (*fakestorage.Server, string, error) {
	for attempt := 1; ; attempt++ {
		p := port
		if p == 0 {
			var err error
			if p, err = FreePort(); err != nil {
				return nil, "", fmt.Errorf("%s emulator: %w", Storage, err)
			}
		}
		host := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
			Scheme: "http",
			Host:   "127.0.0.1",
			Port:   uint16(p),
			// Path-style object URLs are served for this host only.
			PublicHost: host,
			Writer:     out,
		})
		if err == nil {
			return srv, host, nil
		}
		if port != 0 || attempt == 3 {
			return nil, "", fmt.Errorf("%s emulator on %s: %w", Storage, host, err)
		}
	}
}

// probeStorage lists the buckets of a project: only the Cloud Storage JSON
// API answers that with a storage#buckets list.
func probeStorage(ctx context.Context, host string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/storage/v1/b?project="+probeProject, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Kind string `json:"kind"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil || resp.StatusCode != http.StatusOK || body.Kind != "storage#buckets" {
		return fmt.Errorf("storage probe: %s, kind %q, %v", resp.Status, body.Kind, err)
	}
	return nil
}

// storageClient is a Cloud Storage client of the emulator at host, whatever
// STORAGE_EMULATOR_HOST says.
func storageClient(ctx context.Context, host string) (*storage.Client, error) {
	if host == "" {
		return nil, errors.New("no emulator host")
	}
	return storage.NewClient(ctx, option.WithEndpoint("http://"+host+"/storage/v1/"), option.WithoutAuthentication())
}

func provisionStorage(ctx context.Context, host string, t Target) error {
	return eachBucket(ctx, host, t, func(c *storage.Client, b string) error {
		if _, err := c.Bucket(b).Attrs(ctx); err == nil {
			return nil
		} else if !errors.Is(err, storage.ErrBucketNotExist) {
			return fmt.Errorf("bucket %s: %w", b, err)
		}
		if err := c.Bucket(b).Create(ctx, t.Project, nil); err != nil {
			return fmt.Errorf("create bucket %s: %w", b, err)
		}
		return nil
	})
}

func teardownStorage(ctx context.Context, host string, t Target) error {
	return eachBucket(ctx, host, t, func(c *storage.Client, b string) error {
		it := c.Bucket(b).Objects(ctx, nil)
		for {
			o, err := it.Next()
			if errors.Is(err, iterator.Done) || notFound(err) {
				break
			}
			if err != nil {
				return fmt.Errorf("list bucket %s: %w", b, err)
			}
			if err := c.Bucket(b).Object(o.Name).Delete(ctx); err != nil && !notFound(err) {
				return fmt.Errorf("delete %s/%s: %w", b, o.Name, err)
			}
		}
		if err := c.Bucket(b).Delete(ctx); err != nil && !notFound(err) {
			return fmt.Errorf("delete bucket %s: %w", b, err)
		}
		return nil
	})
}

// eachBucket runs fn on each of the target's buckets with one client of the
// emulator at host, stopping at the first error.
func eachBucket(ctx context.Context, host string, t Target, fn func(c *storage.Client, bucket string) error) (err error) {
	defer wrap(&err, "storage")
	if len(t.Buckets) == 0 {
		return nil
	}
	c, err := storageClient(ctx, host)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, b := range t.Buckets {
		if err := fn(c, b); err != nil {
			return err
		}
	}
	return nil
}

// notFound reports a missing bucket or object, whichever way the client
// library says it.
func notFound(err error) bool {
	var ge *googleapi.Error
	return errors.Is(err, storage.ErrBucketNotExist) || errors.Is(err, storage.ErrObjectNotExist) ||
		errors.As(err, &ge) && ge.Code == http.StatusNotFound
}
