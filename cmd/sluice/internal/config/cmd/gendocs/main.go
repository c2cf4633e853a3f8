// Command gendocs writes docs/configuration.md and docs/sluice.schema.json
// from the configuration's field table:
//
//	cd cmd/sluice && go generate ./internal/config
//
// The config package's tests fail while the committed files differ.
package main

import (
	"flag"
	"log"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

func main() {
	docs := flag.String("docs", "docs", "the docs directory to write into")
	flag.Parse()
	for name, data := range map[string][]byte{
		"configuration.md":   config.Reference(),
		"sluice.schema.json": config.Schema(),
	} {
		if err := os.WriteFile(filepath.Join(*docs, name), data, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
