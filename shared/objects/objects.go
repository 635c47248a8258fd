// Package objects is the Cloud Storage adapter: write an object as a stream,
// read it, list by prefix, delete, and sign a URL that lets anyone holding
// it download one object for a while. It knows nothing of what the objects
// hold.
//
// A URL is signed with V4 signing. In the cloud the signature is the
// instance's own service account's, made by the IAM Credentials API's
// signBlob (the identity needs roles/iam.serviceAccountTokenCreator on
// itself; it holds no key). Against the emulator (STORAGE_EMULATOR_HOST)
// it is made with a key the client generates, and the URL names the
// emulator, which serves the object there.
package objects

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"

	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
)

var (
	// ErrNotExist: no object (or no bucket) of that name.
	ErrNotExist = errors.New("objects: no such object")
	// ErrExists: Write found an object of that name already.
	ErrExists = errors.New("objects: object exists")
)

// Client is an instance's Cloud Storage client, built once and closed on
// shutdown.
type Client struct {
	gcs *storage.Client
	// local signs URLs against the emulator; nil in the cloud.
	local *localSigner
}

type localSigner struct {
	host       string // the emulator's host:port
	accessID   string
	privateKey []byte // PEM
}

// New builds the client: against the emulator when cfg.EmulatorHost is set
// (the client library reads STORAGE_EMULATOR_HOST itself), else against
// Cloud Storage with the instance's credentials.
func New(ctx context.Context, cfg config.Objects) (*Client, error) {
	gcs, err := storage.NewClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("objects.New: %w", err)
	}
	c := &Client{gcs: gcs}
	if h := cfg.EmulatorHost; h != "" {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			gcs.Close()
			return nil, fmt.Errorf("objects.New: local signing key: %w", err)
		}
		c.local = &localSigner{
			host:       strings.TrimPrefix(strings.TrimPrefix(h, "http://"), "https://"),
			accessID:   "emulator@local.iam.gserviceaccount.com",
			privateKey: pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		}
	}
	return c, nil
}

// Close closes the client.
func (c *Client) Close() error { return c.gcs.Close() }

// Bucket is one bucket of the client.
func (c *Client) Bucket(name string) *Bucket {
	return &Bucket{c: c, name: name, h: c.gcs.Bucket(name)}
}

// Bucket reads and writes the objects of one bucket.
type Bucket struct {
	c    *Client
	name string
	h    *storage.BucketHandle
}

// Name is the bucket's name.
func (b *Bucket) Name() string { return b.name }

// Object describes a stored object.
type Object struct {
	Name    string
	Size    int64
	Created time.Time
}

// ChunkSize is the most of an object a Writer buffers, and sends in one
// request of its resumable upload: the client library allocates a buffer
// of that size for every writer (its default, 16 MiB, would take most of
// an instance's memory with its concurrent writes) and resends it on a
// retry. The library requires a multiple of 256 KiB.
const ChunkSize = 1 << 20

// Writer streams one new object to the bucket. The object exists once Close
// returns nil; a write abandoned by cancelling the context given to Write
// leaves nothing behind.
type Writer struct {
	w    *storage.Writer
	op   string
	name string
}

// Write starts writing a new object called name, of the given content type.
// Objects are written once: when the name is taken, Close fails with
// ErrExists. That precondition also makes the upload safe for the client
// library to retry.
func (b *Bucket) Write(ctx context.Context, name, contentType string) *Writer {
	w := b.h.Object(name).If(storage.Conditions{DoesNotExist: true}).NewWriter(ctx)
	w.ContentType = contentType
	w.ChunkSize = ChunkSize
	return &Writer{w: w, op: fmt.Sprintf("objects.Write(%s/%s)", b.name, name), name: name}
}

func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if err != nil {
		return n, classify(w.op, err)
	}
	return n, nil
}

// Close finishes the upload and reports whether the object was stored.
func (w *Writer) Close() error {
	if err := w.w.Close(); err != nil {
		return classify(w.op, err)
	}
	return nil
}

// Read opens the object called name.
func (b *Bucket) Read(ctx context.Context, name string) (io.ReadCloser, error) {
	r, err := b.h.Object(name).NewReader(ctx)
	if err != nil {
		return nil, classify(fmt.Sprintf("objects.Read(%s/%s)", b.name, name), err)
	}
	return r, nil
}

// List returns the objects whose names start with prefix, by name.
func (b *Bucket) List(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	it := b.h.Objects(ctx, &storage.Query{Prefix: prefix})
	for {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, classify(fmt.Sprintf("objects.List(%s, %q)", b.name, prefix), err)
		}
		out = append(out, Object{Name: a.Name, Size: a.Size, Created: a.Created})
	}
}

// Delete deletes the object called name; one already gone is not an error.
func (b *Bucket) Delete(ctx context.Context, name string) error {
	err := b.h.Object(name).Delete(ctx)
	if err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
		return classify(fmt.Sprintf("objects.Delete(%s/%s)", b.name, name), err)
	}
	return nil
}

// SignedURL returns a URL that downloads the object called name (GET) until
// expires, for whoever holds it.
func (b *Bucket) SignedURL(name string, expires time.Time) (string, error) {
	opts := &storage.SignedURLOptions{Method: http.MethodGet, Expires: expires, Scheme: storage.SigningSchemeV4}
	if l := b.c.local; l != nil {
		opts.GoogleAccessID, opts.PrivateKey = l.accessID, l.privateKey
		opts.Hostname, opts.Insecure = l.host, true
	}
	u, err := b.h.SignedURL(name, opts)
	if err != nil {
		return "", classify(fmt.Sprintf("objects.SignedURL(%s/%s)", b.name, name), err)
	}
	return u, nil
}

// classify wraps a Cloud Storage error with its operation: a missing object
// or bucket as ErrNotExist, a failed precondition of Write as ErrExists, and
// what a retry may cure (429, 5xx, a deadline) as errs.ErrBackendUnavailable.
func classify(op string, err error) error {
	if errors.Is(err, storage.ErrObjectNotExist) || errors.Is(err, storage.ErrBucketNotExist) {
		return fmt.Errorf("%w: %s: %w", ErrNotExist, op, err)
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		switch {
		case ge.Code == http.StatusPreconditionFailed:
			return fmt.Errorf("%w: %s: %w", ErrExists, op, err)
		case ge.Code == http.StatusNotFound:
			return fmt.Errorf("%w: %s: %w", ErrNotExist, op, err)
		case ge.Code == http.StatusTooManyRequests || ge.Code >= 500:
			return errs.Unavailable(op, err)
		}
	}
	return errs.Backend(op, err)
}
