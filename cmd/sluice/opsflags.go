package main

import (
	"flag"
	"fmt"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/valkeyops"
)

// opsFlags are the flags every operator command shares with sluice serve:
// the configuration file and the Valkey addresses that override its own.
type opsFlags struct {
	configPath string
	valkey     string
}

func addOpsFlags(fs *flag.FlagSet) *opsFlags {
	o := &opsFlags{}
	fs.StringVar(&o.configPath, "config", "", "configuration `file`, as for sluice serve (default: the embedded examples/sluice.yaml)")
	fs.StringVar(&o.valkey, "valkey", "", "Valkey `addresses`, comma-separated (several: a cluster); override the config's")
	return o
}

// load reads the configuration as sluice serve would and applies --valkey.
// With needValkey, a configuration without Valkey addresses is an error.
func (o *opsFlags) load(needValkey bool) (*config.Config, error) {
	cfg, err := o.read()
	if err != nil {
		return nil, err
	}
	if addrs := splitAddrs(o.valkey); len(addrs) > 0 {
		setValkeyAddresses(cfg, addrs)
	}
	if needValkey && !valkeyops.Configured(cfg.Valkey) {
		return nil, fmt.Errorf("%s names no Valkey: add a valkey section with addresses (or sentinel), or pass --valkey host:port", cfg.Source)
	}
	return cfg, nil
}

// stringList is a flag that may be repeated.
type stringList []string

func (l *stringList) String() string     { return fmt.Sprint(*l) }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// read reads the --config file, else the embedded example.
func (o *opsFlags) read() (*config.Config, error) {
	if o.configPath != "" {
		return config.Load(o.configPath)
	}
	return config.Default()
}
