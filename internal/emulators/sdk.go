package emulators

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// DefaultSDKRoot is where the Debian/Ubuntu google-cloud-cli packages install
// the Google Cloud CLI.
const DefaultSDKRoot = "/usr/lib/google-cloud-sdk"

// Emulator binaries, relative to the SDK root, and the apt package that
// installs each of them.
var binaries = []struct {
	kind, path, aptPackage string
}{
	{Spanner, "bin/cloud_spanner_emulator/gateway_main", "google-cloud-cli-spanner-emulator"},
	{Bigtable, "platform/bigtable-emulator/cbtemulator", "google-cloud-cli-bigtable-emulator"},
	{PubSub, "platform/pubsub-emulator/bin/cloud-pubsub-emulator", "google-cloud-cli-pubsub-emulator"},
	{Firestore, "platform/cloud-firestore-emulator/cloud_firestore_emulator", "google-cloud-cli-firestore-emulator"},
}

// SDKRoot returns the root of the Google Cloud CLI installation holding the
// emulators: $CLOUDSDK_ROOT when set, else the root `gcloud info` reports,
// else DefaultSDKRoot. It fails, naming the missing binary and the apt package
// that provides it, when an emulator is not installed under that root.
func SDKRoot() (string, error) {
	root := sdkRootCandidate()
	if err := checkBinaries(root); err != nil {
		return "", err
	}
	return root, nil
}

func sdkRootCandidate() string {
	if r := os.Getenv("CLOUDSDK_ROOT"); r != "" {
		return r
	}
	gcloud, err := exec.LookPath("gcloud")
	if err != nil {
		return DefaultSDKRoot
	}
	// gcloud lives at <sdk_root>/bin/gcloud (often behind a symlink); trusting
	// that layout when the emulators are there saves the second that
	// `gcloud info` takes to start Python, in every test binary.
	if real, err := filepath.EvalSymlinks(gcloud); err == nil {
		if root := filepath.Dir(filepath.Dir(real)); checkBinaries(root) == nil {
			return root
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, gcloud, "info", "--format=value(installation.sdk_root)").Output()
	if r := strings.TrimSpace(string(out)); err == nil && r != "" {
		return r
	}
	return DefaultSDKRoot
}

func checkBinaries(root string) error {
	var errs []error
	for _, b := range binaries {
		p := filepath.Join(root, b.path)
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			errs = append(errs, fmt.Errorf("%s emulator not found: %s is missing or not executable (install the apt package %s, or set CLOUDSDK_ROOT to the Google Cloud CLI root)", b.kind, p, b.aptPackage))
		}
	}
	if _, err := exec.LookPath("java"); err != nil {
		errs = append(errs, errors.New("java not found on PATH: the Pub/Sub and Firestore emulators need a Java 11+ runtime (install the apt package openjdk-17-jre-headless)"))
	}
	return errors.Join(errs...)
}

func binaryPath(root, kind string) string {
	for _, b := range binaries {
		if b.kind == kind {
			return filepath.Join(root, b.path)
		}
	}
	panic("emulators: unknown emulator " + kind)
}
