// Command gcfbuild writes the functions' source archive, the zip that
// Terraform uploads and Cloud Functions builds (cloudbuild.yaml's archive
// step):
//
//	go run ./tools/gcfbuild -zip /workspace/source.zip
//
// Its tests are the deployability check of make test: they lay out that
// archive as Cloud Functions' Go buildpack does, generate the main package
// the buildpack would, build it and start every entry point Terraform
// deploys (see buildpack.go).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
)

func main() {
	out := flag.String("zip", "", "write the functions' source archive to this file")
	root := flag.String("root", ".", "the module root")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	files, err := SourceFiles(*root)
	if err != nil {
		log.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteZip(&b, *root, files); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d files, %d bytes\n", *out, len(files), b.Len())
}
