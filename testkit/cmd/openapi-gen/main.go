// Command openapi-gen regenerates the Go types of each service's OpenAPI
// document (pkg/api/<name>api/types.gen.go); with arguments, only those
// services'. Run from the repository root or the module testkit:
// `make openapi`.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/usagebilling/billing/testkit/apigen"
)

func main() {
	root := filepath.Join("pkg", "api")
	if _, err := os.Stat(root); err != nil {
		root = filepath.Join("..", "pkg", "api")
	}
	for _, s := range apigen.Services {
		if len(os.Args) > 1 && !slices.Contains(os.Args[1:], s.Name) {
			continue
		}
		src, err := apigen.GenerateDir(root, s)
		if err != nil {
			fmt.Fprintln(os.Stderr, "openapi-gen:", err)
			os.Exit(1)
		}
		out := filepath.Join(root, s.Dir, apigen.GeneratedFile)
		if err := os.WriteFile(out, src, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "openapi-gen:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", out)
	}
}
